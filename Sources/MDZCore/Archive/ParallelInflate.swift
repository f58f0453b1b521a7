import CArchive
import Crypto
import Dispatch
import SystemPackage

/// Inflates a deflated entry on several cores, using the restart points its writer recorded
/// (``DocumentMetadata/DeflateRestarts``).
///
/// Each segment is read (`pread`) and inflated on its own by one of `workers` serial queues, round robin, each owning
/// one z_stream, and checked there: it must be valid deflate that reaches back no further than its own start, give
/// exactly its share of bytes, and end where a segment must (the last ends the stream with no byte after it; the
/// others at a block boundary on a byte boundary, outside the final block). Inflated that way, the segments give
/// exactly what inflating the whole stream in one go gives, so no other zip reader can see other bytes. The
/// caller's thread takes the segments in order: SHA-256, the CRC-32 combined from the segments', and `consume`.
/// A ring of `workers + 1` slots (one segment in and out each, about 520 KiB) bounds memory.
///
/// The index comes from the metadata and is untrusted: ``check(_:size:compressedSize:)`` refuses one that does not
/// describe the entry before anything is read.
///
/// Not `Sendable`: one entry at a time, driven from one thread.
@_spi(Core) public final class ParallelInflater {
    /// Segments larger than this are inflated in one stream by libarchive instead (memory stays bounded).
    @_spi(Core) public static let maxInterval: Int64 = 1 << 20
    @_spi(Core) public static let minInterval: Int64 = 64 << 10

    @_spi(Core) public enum Failure: Error, Sendable {
        /// The segment at this index is not what a segment must be (see ``SegmentInflater/Failure``).
        case segment(index: Int, SegmentInflater.Failure)
        /// The segment inflated to another size than its share.
        case segmentSize(index: Int, produced: Int, expected: Int)
        /// The file ended before the segment's bytes did.
        case truncated(index: Int)
        /// The segment's bytes do not have the CRC-32 the index records for it (format version 2).
        case segmentCRC(index: Int)
        /// The segment's compressed bytes do not have the CRC-32C the index records for them.
        case segmentCompressedCRC(index: Int)
        case io(Errno)
        /// zlib could not allocate an inflater.
        case outOfMemory
    }

    @_spi(Core) public struct Result: Sendable {
        @_spi(Core) public var crc32: UInt32
        /// The SHA-256 of every byte in order; `nil` when not asked for (a version 2 store is checked by its
        /// segment digests instead).
        @_spi(Core) public var sha256: String?
    }

    /// The most compressed bytes a segment of `length` uncompressed bytes may take: what ``ParallelDeflater``'s
    /// slices can take at most (a stored block's overhead is far below it).
    @_spi(Core) public static func compressedBound(forLength length: Int64) -> Int64 {
        DeflateBounds.compressedBound(forSize: length)
    }

    /// Whether the index describes an entry of `size` bytes deflated into `compressedSize` bytes; a reason when not.
    ///
    /// Every number in the index comes from the metadata: each is range-checked before it is used, and the arithmetic
    /// on them is checked (an interval of 2⁶³ − 1 or an offset past the entry is a reason, never an overflow).
    @_spi(Core) public static func check(_ restarts: DeflateRestarts, size: UInt64, compressedSize: UInt64) -> String? {
        let interval = restarts.interval
        guard interval >= minInterval else { return "its interval of \(interval) bytes is below 64 KiB" }
        guard let size = Int64(exactly: size), let compressedSize = Int64(exactly: compressedSize) else {
            return "the entry's sizes are beyond 2^63 - 1 bytes"
        }
        let expectedCount = size / interval + (size % interval == 0 ? 0 : 1)  // size ≥ 0, interval ≥ 64 KiB: no overflow
        guard size > 0, Int64(restarts.offsets.count) == expectedCount else {
            return "it has \(restarts.offsets.count) segments where \(expectedCount) of \(interval) bytes make the store"
        }
        guard restarts.offsets.first == 0 else { return "its first segment does not start at 0" }
        for index in restarts.offsets.indices {
            let (start, end) = restarts.compressedBounds(ofSegment: index, streamSize: compressedSize)
            guard start >= 0, end > start, end <= compressedSize else {
                return "segment \(index) does not lie inside the entry's data"
            }
            // > index < ⌈size ÷ interval⌉, so index × interval < size: checked all the same.
            let (segmentStart, overflow) = Int64(index).multipliedReportingOverflow(by: interval)
            guard !overflow, segmentStart < size else { return "segment \(index) starts past the entry's end" }
            let length = min(interval, size - segmentStart)
            guard end - start <= compressedBound(forLength: length) else {
                return "segment \(index) takes \(end - start) bytes for \(length), more than deflate ever needs"
            }
        }
        return nil
    }

    private final class Slot: @unchecked Sendable {  // hot path: MiB buffers handed over by `done`, one side at a time
        @_spi(Core) public let input: UnsafeMutableRawBufferPointer
        @_spi(Core) public let output: UnsafeMutableRawBufferPointer
        @_spi(Core) public let done = DispatchSemaphore(value: 0)
        @_spi(Core) public var index = 0
        @_spi(Core) public var fileOffset: UInt64 = 0
        @_spi(Core) public var inputLength = 0
        @_spi(Core) public var expected = 0
        @_spi(Core) public var isLast = false
        @_spi(Core) public var isPending = false
        @_spi(Core) public var produced = 0
        @_spi(Core) public var crc32: UInt32 = 0
        /// The CRC-32C the index records for the segment's compressed bytes, checked before they are inflated.
        @_spi(Core) public var expectedCompressedCRC32C: UInt32?
        @_spi(Core) public var failure: Failure?

        @_spi(Core) public init(interval: Int) {
            input = .allocate(byteCount: Int(ParallelInflater.compressedBound(forLength: Int64(interval))), alignment: 64)
            output = .allocate(byteCount: interval, alignment: 64)
        }

        deinit {
            input.deallocate()
            output.deallocate()
        }
    }

    private final class Worker: @unchecked Sendable {  // a C codec handle, touched only on its own serial queue
        @_spi(Core) public let queue: DispatchQueue
        @_spi(Core) public let inflater: SegmentInflater

        @_spi(Core) public init(index: Int) throws {
            queue = DispatchQueue(label: "ManagedDocument.inflate.\(index)")
            guard let inflater = SegmentInflater() else { throw Failure.outOfMemory }
            self.inflater = inflater
        }

        @_spi(Core) public func inflate(_ slot: Slot, from descriptor: FileDescriptor) {
            defer { slot.done.signal() }
            slot.failure = nil
            do {
                var read = 0
                while read < slot.inputLength {
                    let count = try descriptor.read(
                        fromAbsoluteOffset: Int64(slot.fileOffset) + Int64(read),
                        into: UnsafeMutableRawBufferPointer(rebasing: slot.input[read..<slot.inputLength]))
                    if count == 0 {
                        slot.failure = .truncated(index: slot.index)
                        return
                    }
                    read += count
                }
            } catch let error as Errno {
                slot.failure = .io(error)
                return
            } catch {
                slot.failure = .io(.ioError)
                return
            }
            if let expected = slot.expectedCompressedCRC32C,
               CRC32C.of(UnsafeRawBufferPointer(rebasing: slot.input[..<slot.inputLength])) != expected {
                slot.failure = .segmentCompressedCRC(index: slot.index)
                return
            }
            let produced = inflater.inflate(UnsafeRawBufferPointer(rebasing: slot.input[..<slot.inputLength]),
                                            into: UnsafeMutableRawBufferPointer(rebasing: slot.output[..<slot.expected]),
                                            isLast: slot.isLast)
            let status: Int
            switch produced {
            case .success(let count): status = count
            case .failure(let failure):
                slot.failure = .segment(index: slot.index, failure)
                return
            }
            guard status == slot.expected else {
                slot.failure = .segmentSize(index: slot.index, produced: status, expected: slot.expected)
                return
            }
            slot.produced = status
            var crc = CRC32()
            crc.update(UnsafeRawBufferPointer(rebasing: slot.output[..<status]))
            slot.crc32 = crc.value
        }
    }

    private var workers: [Worker]
    private var slots: [Slot]
    private let interval: Int

    /// - Parameters:
    ///   - workers: threads inflating at once (at least 1).
    ///   - interval: the index's interval, at most ``maxInterval``.
    @_spi(Core) public init(workers: Int, interval: Int64) throws {
        precondition(interval >= Self.minInterval && interval <= Self.maxInterval, "interval out of range")
        let count = max(1, workers)
        self.interval = Int(interval)
        self.workers = try (0..<count).map { try Worker(index: $0) }
        slots = (0..<(count + 1)).map { _ in Slot(interval: Int(interval)) }
    }

    deinit {
        for slot in slots where slot.isPending { slot.done.wait() }  // no worker may still touch a buffer
        slots = []
        workers = []
        releaseFreedMemory()  // the next phase (verify, extract) allocates afresh; keep the peak to one phase
    }

    /// Inflates the entry whose compressed data starts at `dataOffset` in `descriptor`, handing the bytes in order
    /// to `consume`. The index must have passed ``check(_:size:compressedSize:)``. Each segment is checked against
    /// its recorded CRC-32 when the index records them (``DeflateRestarts/crc32s``, checked when the bundle opened),
    /// and its compressed bytes against their CRC-32C when it records those (``DeflateRestarts/compressedCRC32Cs``),
    /// before any of its bytes are handed on; with `hashing`, the bytes' SHA-256 is computed too.
    @_spi(Core)
    public func inflate(_ descriptor: FileDescriptor, dataOffset: UInt64, size: UInt64, compressedSize: UInt64,
                 restarts: DeflateRestarts, hashing: Bool = true,
                 consume: (UnsafeRawBufferPointer) throws -> Void) throws -> Result {
        var hasher = SHA256()
        var crc: UInt32 = 0
        let offsets = restarts.offsets
        var submitted = 0
        var emitted = 0

        func submit() {
            let slot = slots[submitted % slots.count]
            let index = submitted
            let (start, end) = restarts.compressedBounds(ofSegment: index, streamSize: Int64(compressedSize))
            slot.index = index
            slot.fileOffset = dataOffset + UInt64(start)
            slot.inputLength = Int(end - start)
            slot.expected = Int(min(UInt64(interval), size - UInt64(index) * UInt64(interval)))
            slot.isLast = index == offsets.count - 1
            slot.expectedCompressedCRC32C = !restarts.recordsCompressedCRC32Cs ? nil
                : restarts.recordedCompressedCRC(ofSegment: index) ?? 0
            let worker = workers[index % workers.count]
            worker.queue.async { worker.inflate(slot, from: descriptor) }
            submitted += 1
        }

        while emitted < offsets.count {
            while submitted < offsets.count && submitted - emitted < slots.count { submit() }
            let slot = slots[emitted % slots.count]
            slot.done.wait()
            slot.isPending = false
            if let failure = slot.failure { throw failure }
            if restarts.recordsCRC32s, restarts.recordedCRC(ofSegment: slot.index) != slot.crc32 {
                throw Failure.segmentCRC(index: slot.index)
            }
            let bytes = UnsafeRawBufferPointer(rebasing: slot.output[..<slot.produced])
            if hashing { hasher.update(bufferPointer: bytes) }
            crc = CRC32.combine(crc, slot.crc32, lengthB: slot.produced)
            try consume(bytes)
            emitted += 1
        }
        return Result(crc32: crc, sha256: hashing ? hasher.finalize().hexString : nil)
    }
}

/// Gives the heap's free pages back to the system (glibc keeps freed buffers of a few hundred KiB in the heap).
@_spi(Core) public func releaseFreedMemory() {
    malloc_trim(0)
}
