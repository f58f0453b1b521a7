import CArchive
import Crypto
import Dispatch
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SystemPackage
@_spi(Core) import MDZCore

/// Compresses one stream into a single raw deflate stream on several cores, the way pigz does.
///
/// The input is cut into slices (``sliceSize(forLevel:)``: 128 KiB for ISA-L's levels 1-3, 64 KiB for zlib's 4-9).
/// Each slice is compressed by a stream of its own and ends with a sync flush: an empty stored block that leaves the
/// bit stream byte-aligned and not final. The last slice ends the stream. Laid end to end, the slices' outputs are
/// one valid deflate stream that any inflater reads. Every ``restartInterval(forSize:)`` bytes a slice starts without
/// a dictionary: the stream can be inflated from there on its own, so ``ParallelInflater`` can inflate the segments
/// on several cores. Other slices are primed with the 32 KiB of input before them, so matches reach back as far as in
/// one stream (with ISA-L's 128 KiB slices every slice is a restart up to 2 GiB; the output is about 1 % larger
/// than one stream's).
///
/// The caller's thread reads each slice, hashes it (SHA-256, in order) and hands it to one of `workers` serial
/// queues, round robin; each queue owns one compressor and computes the slice's CRC-32, which the caller's thread
/// combines in order while it emits the compressed slices, in order. A ring of `workers + 2` slots (one slice per
/// worker, one being read, one waiting to be written) bounds memory: two slices and a dictionary a slot, plus one
/// compressor (about 220 KiB for ISA-L, 270 KiB for zlib) a worker, whatever the stream's size. With no workers,
/// the caller's thread compresses each slice itself, in one slot sized to the entry when it is smaller than a slice.
///
/// Not `Sendable`: one compression at a time, driven from one thread.
final class ParallelDeflater {
    static let dictionarySize = 32 << 10
    /// The smallest slice of any engine: ``compressedBound(forSize:)`` and restart intervals are counted in these.
    static let minimumSliceSize = DeflateBounds.minimumSliceSize

    /// Bytes per slice at a level: ISA-L compresses 128 KiB slices without a dictionary about as small as 64 KiB
    /// slices primed with one, and much faster; zlib's slices stay at 64 KiB (pigz's scheme, less memory a slot).
    static func sliceSize(forLevel level: Int) -> Int {
        DeflateEngine.isFast(level) ? 128 << 10 : minimumSliceSize
    }

    /// The result of one compression.
    struct Result: Sendable {
        var uncompressedSize: Int64
        var compressedSize: Int64
        var crc32: UInt32
        /// The SHA-256 of the source; `nil` when not asked for, or when segments were reused (the source is not
        /// read where they are).
        var sha256: String?
        /// Where each segment of ``restartInterval`` bytes starts in the compressed stream, with each segment's
        /// CRC-32 (``DeflateRestarts/crc32s``) and its compressed bytes' CRC-32C (``DeflateRestarts/compressedCRC32Cs``).
        var restarts: DeflateRestarts
    }

    /// Why a compression stopped; the caller names the entry.
    enum Failure: Error, Sendable {
        /// The compressor (ISA-L or zlib, named) refused, or the output did not fit its bound.
        case compressor(String, SliceDeflater.Failure)
        /// A compressor's state could not be allocated.
        case outOfMemory
        /// The source produced more or fewer bytes than announced.
        case sizeMismatch(grew: Bool)
    }

    /// One slot of the ring: the slice with its dictionary in front, and the compressed output.
    private final class Slot: @unchecked Sendable {  // hot path: MiB buffers handed over by `done`, one side at a time
        let input: UnsafeMutableRawBufferPointer  // [dictionary | slice]
        let output: UnsafeMutableRawBufferPointer
        let capacity: Int
        let done = DispatchSemaphore(value: 0)
        var dictionaryLength = 0
        var length = 0
        var isLast = false
        var isRestart = false
        /// The restart segment this slot stands for when its compressed bytes are reused (``Reuse``).
        var reusedSegment: Int?
        var isPending = false
        var compressedLength = 0
        var failure: SliceDeflater.Failure?
        var crc32: UInt32 = 0

        /// A slot for slices of up to `capacity` bytes.
        init(capacity: Int) {
            self.capacity = capacity
            input = .allocate(byteCount: ParallelDeflater.dictionarySize + capacity, alignment: 64)
            output = .allocate(byteCount: ParallelDeflater.outputCapacity(forSlice: capacity), alignment: 64)
        }

        deinit {
            input.deallocate()
            output.deallocate()
        }

        var slice: UnsafeMutableRawBufferPointer {
            UnsafeMutableRawBufferPointer(rebasing: input[ParallelDeflater.dictionarySize...])
        }
    }

    /// A worker's compressor state (ISA-L's or zlib's, by level); touched only on its own serial queue.
    private final class Worker: @unchecked Sendable {  // a C codec handle, touched only on its own serial queue
        /// `nil` for the caller's own thread.
        let queue: DispatchQueue?
        let deflater: SliceDeflater

        init(index: Int?, level: Int) throws {
            queue = index.map { DispatchQueue(label: "ManagedDocument.deflate.\($0)") }
            guard let deflater = SliceDeflater(level: level) else { throw Failure.outOfMemory }
            self.deflater = deflater
        }

        func compress(_ slot: Slot) {
            let dictionary = UnsafeRawBufferPointer(
                rebasing: slot.input[(ParallelDeflater.dictionarySize - slot.dictionaryLength)..<ParallelDeflater.dictionarySize])
            let input = UnsafeRawBufferPointer(rebasing: slot.slice[..<slot.length])
            switch deflater.deflate(dictionary: dictionary, input: input, into: slot.output, isLast: slot.isLast) {
            case .success(let length):
                slot.compressedLength = length
                slot.failure = nil
            case .failure(let failure):
                slot.compressedLength = 0
                slot.failure = failure
            }
            var crc = CRC32()
            crc.update(input)
            slot.crc32 = crc.value
            slot.done.signal()
        }
    }

    /// The output space that always holds one compressed slice of `length` bytes.
    static func outputCapacity(forSlice length: Int) -> Int {
        DeflateBounds.outputCapacity(forSlice: length)
    }

    /// The most bytes ``compress(size:read:write:)`` can produce for `size` input bytes, whatever the engine (counted
    /// in the smallest slices, whose overheads add up to the most). Saturates at `Int64.max` (readers ask it of sizes
    /// a bundle declares).
    static func compressedBound(forSize size: Int64) -> Int64 {
        DeflateBounds.compressedBound(forSize: size)
    }

    /// The number of cores this process may use (its CPU affinity and cgroup quota included).
    static var availableCores: Int { DeflateBounds.availableCores }

    /// Uncompressed bytes between two points where the stream starts afresh (no dictionary), so that a reader
    /// can inflate the segments on several cores: 128 KiB, or more for stores over 2 GiB, so that no stream has
    /// more than 16,384 segments. Always a multiple of every engine's ``sliceSize(forLevel:)``.
    static func restartInterval(forSize size: Int64) -> Int {
        restartInterval(forSize: size, growing: true)
    }

    /// The restart interval: growing with the size as ``restartInterval(forSize:)`` says (format version 2, whose
    /// metadata holds the restart points), or 128 KiB at any size (version 3, whose store index holds them,
    /// FORMAT.md 13.2: what one read in place inflates does not grow with the store).
    static func restartInterval(forSize size: Int64, growing: Bool) -> Int {
        var interval = 128 << 10
        if !growing { return interval }
        while Int64(interval) * 16_384 < size { interval *= 2 }
        return interval
    }

    private var workers: [Worker]
    private var slots: [Slot]
    private let restartInterval: Int
    private let sliceSize: Int
    /// Names the engine in a failure.
    private let engine: String

    /// - Parameters:
    ///   - level: deflate level 1...9 (1-3: ISA-L, 4-9: zlib).
    ///   - workers: threads compressing at once; 0 compresses on the caller's thread.
    ///   - restartInterval: uncompressed bytes between fresh starts, a multiple of ``sliceSize(forLevel:)``.
    ///   - size: the stream's size, when known: no slot is larger than it needs to be.
    init(level: Int, workers: Int, restartInterval: Int, size: Int64? = nil) throws {
        precondition((1...9).contains(level), "deflate level must be 1...9")
        let sliceSize = Self.sliceSize(forLevel: level)
        precondition(restartInterval > 0 && restartInterval % sliceSize == 0, "restarts fall on slice boundaries")
        self.restartInterval = restartInterval
        self.sliceSize = sliceSize
        engine = DeflateEngine.name(forLevel: level)
        let capacity = Int(min(Int64(sliceSize), max(1, size ?? Int64(sliceSize))))
        if workers > 0 {
            self.workers = try (0..<workers).map { try Worker(index: $0, level: level) }
            slots = (0..<(workers + 2)).map { _ in Slot(capacity: capacity) }
        } else {
            self.workers = [try Worker(index: nil, level: level)]
            slots = [Slot(capacity: capacity)]
        }
    }

    deinit {
        for slot in slots where slot.isPending { slot.done.wait() }  // no worker may still touch a buffer
        let wasLarge = slots.count > 1
        slots = []
        workers = []
        // The next phase (verify, extract) allocates afresh; keep the peak to one phase. A small entry's buffers are
        // left to malloc for the next entry: trimming after each would cost page faults per entry.
        if wasLarge { releaseFreedMemory() }
    }

    /// Restart segments whose compressed bytes are taken from an earlier stream of the same restart interval
    /// instead of being compressed again (an incremental save, FORMAT.md 16.1). The caller proved each reused
    /// segment's bytes unchanged and knows their CRC-32 (the source is not read where segments are reused, so this
    /// compressor cannot hash it: a version 2 store needs no whole-stream SHA-256).
    struct Reuse {
        /// Memberwise.
        init(crc32: @escaping (_ index: Int) throws -> UInt32?,
                                skip: @escaping (_ count: Int64) throws -> Void,
                                source: @escaping (_ index: Int) -> (file: FileDescriptor, range: Range<Int64>, path: FilePath),
                                compressedCRC32C: @escaping (_ index: Int) -> UInt32) {
            self.crc32 = crc32
            self.skip = skip
            self.source = source
            self.compressedCRC32C = compressedCRC32C
        }

        /// The CRC-32 of restart segment `index`'s uncompressed bytes when its compressed bytes are reused; `nil`
        /// when it is compressed. Only the last segment of the stream may be a reused last segment (one that ends
        /// the stream): the caller reuses a last segment only as the last.
        var crc32: (_ index: Int) throws -> UInt32?
        /// Moves the source past `count` bytes (those of a reused segment).
        var skip: (_ count: Int64) throws -> Void
        /// Where restart segment `index`'s reused compressed bytes lie: the file, the byte range, its path.
        var source: (_ index: Int) -> (file: FileDescriptor, range: Range<Int64>, path: FilePath)
        /// The CRC-32C of restart segment `index`'s reused compressed bytes, as the earlier stream's index records it
        /// (carried over unread, as the CRC-32; the caller checks the copied bytes against it before the stream is
        /// used).
        var compressedCRC32C: (_ index: Int) -> UInt32
    }

    /// Compresses exactly `size` bytes pulled from `read` (which returns 0 at the end) and hands the compressed bytes,
    /// in order, to `write`; with `reuse`, the restart segments it names are handed to `copy` (a file range) instead.
    /// With `hashing`, the source's SHA-256 is computed too (never when segments are reused).
    func compress(size: Int64, read: (UnsafeMutableRawBufferPointer) throws -> Int,
                  write: (UnsafeRawBufferPointer) throws -> Void,
                  copy: (FileDescriptor, Range<Int64>, FilePath) throws -> Void = { _, _, _ in },
                  reuse: Reuse? = nil, hashing: Bool = true) throws -> Result {
        let hashes = hashing && reuse == nil
        var hasher = SHA256()
        var crc: UInt32 = 0
        var segmentCRCs: [UInt32] = []
        var compressedCRCs: [CRC32C] = []
        var compressedCRCValues: [UInt32] = []
        var consumed: Int64 = 0
        var compressed: Int64 = 0
        var submitted = 0
        var emitted = 0
        var restarts: [Int64] = []

        func emitOldest() throws {
            let slot = slots[emitted % slots.count]
            slot.done.wait()
            slot.isPending = false
            if let failure = slot.failure { throw Failure.compressor(engine, failure) }
            if slot.isRestart {
                restarts.append(compressed)
                segmentCRCs.append(slot.crc32)
                if let running = compressedCRCs.last { compressedCRCValues.append(running.value) }
                compressedCRCs = [CRC32C()]
            } else if let last = segmentCRCs.indices.last {
                segmentCRCs[last] = CRC32.combine(segmentCRCs[last], slot.crc32, lengthB: slot.length)
            }
            crc = CRC32.combine(crc, slot.crc32, lengthB: slot.length)
            if let index = slot.reusedSegment, let reuse {
                let source = reuse.source(index)
                try copy(source.file, source.range, source.path)
                compressed += Int64(source.range.count)
                // > A reused segment is a whole restart segment: its recorded CRC-32C, checked by the caller.
                compressedCRCs = []
                compressedCRCValues.append(reuse.compressedCRC32C(index))
            } else {
                let output = UnsafeRawBufferPointer(rebasing: slot.output[..<slot.compressedLength])
                try write(output)
                compressed += Int64(slot.compressedLength)
                if !compressedCRCs.isEmpty { compressedCRCs[0].update(output) }
            }
            emitted += 1
        }

        var isFinished = false
        while !isFinished {
            if submitted - emitted == slots.count { try emitOldest() }
            let slot = slots[submitted % slots.count]
            slot.isRestart = consumed % Int64(restartInterval) == 0
            slot.reusedSegment = nil
            if slot.isRestart, let reuse, let segmentCRC = try reuse.crc32(Int(consumed / Int64(restartInterval))) {
                // A whole restart segment, copied when its turn comes to be written; the source skips it.
                let length = min(Int64(restartInterval), size - consumed)
                try reuse.skip(length)
                slot.reusedSegment = Int(consumed / Int64(restartInterval))
                slot.length = Int(length)
                slot.crc32 = segmentCRC
                slot.failure = nil
                consumed += length
                slot.isLast = consumed == size
                if slot.isLast {
                    var probe: UInt8 = 0
                    let extra = try withUnsafeMutableBytes(of: &probe) { try read($0) }
                    if extra != 0 { throw Failure.sizeMismatch(grew: true) }
                }
                slot.isPending = true
                slot.done.signal()
                submitted += 1
                isFinished = slot.isLast
                continue
            }
            if !slot.isRestart {
                // > Before the slice is read: with one slot, the previous slice is the one about to be overwritten.
                let previous = slots[(submitted - 1) % slots.count]
                let tail = previous.input.baseAddress! + Self.dictionarySize + previous.length - Self.dictionarySize
                slot.input.baseAddress!.copyMemory(from: tail, byteCount: Self.dictionarySize)
                slot.dictionaryLength = Self.dictionarySize  // every slice but the last is full, so it has 32 KiB
            } else {
                slot.dictionaryLength = 0
            }
            // Fill the slice completely (reads may come short) or up to the announced size.
            let wanted = Int(min(Int64(slot.capacity), size - consumed))
            var length = 0
            let slice = slot.slice
            while length < wanted {
                let count = try read(UnsafeMutableRawBufferPointer(rebasing: slice[length..<wanted]))
                if count == 0 { throw Failure.sizeMismatch(grew: false) }
                length += count
            }
            consumed += Int64(length)
            slot.length = length
            slot.isLast = consumed == size
            if slot.isLast {
                // One more read must find the end; a source that grew is not packed half.
                var probe: UInt8 = 0
                let extra = try withUnsafeMutableBytes(of: &probe) { try read($0) }
                if extra != 0 { throw Failure.sizeMismatch(grew: true) }
            }
            if hashes { hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: slice[..<length])) }
            let worker = workers[submitted % workers.count]
            slot.isPending = true
            if let queue = worker.queue {
                queue.async { worker.compress(slot) }
            } else {
                worker.compress(slot)
            }
            submitted += 1
            isFinished = slot.isLast
        }
        while emitted < submitted { try emitOldest() }
        if let running = compressedCRCs.last { compressedCRCValues.append(running.value) }
        return Result(uncompressedSize: consumed, compressedSize: compressed, crc32: crc,
                      sha256: hashes ? hasher.finalize().hexString : nil,
                      restarts: DeflateRestarts(interval: Int64(restartInterval), offsets: restarts,
                                                crc32s: DeflateRestarts.spelled(segmentCRCs),
                                                compressedCRC32Cs: DeflateRestarts.spelled(compressedCRCValues)))
    }
}
