import CArchive
import SystemPackage

/// Reads one entry's data straight from the bundle file: a stored entry's bytes, or a deflated entry's single
/// stream inflated by ISA-L (about twice as fast as zlib), and checks them at the end against the central
/// directory: the stream ends exactly where the entry's compressed bytes do, and the CRC-32 matches.
///
/// The entry's place in the file comes from ``BundleReader``, which validated every local header, the data ranges
/// and their order before anything is read; sizes are the caller's to count (it stops a stream that inflates beyond
/// the size the directory declares). Memory: one 64 KiB input buffer and ISA-L's state of about 70 KiB.
///
/// Not `Sendable`: one entry at a time, driven from one thread.
/// Where one entry's data lies in the file, and what it must check out to, as a checked central directory says.
@_spi(Core) public struct EntryLocation: Sendable, Equatable {
    /// The entry's name, for messages.
    @_spi(Core) public var name: String
    /// Where its data starts (after the local header).
    @_spi(Core) public var dataOffset: UInt64
    @_spi(Core) public var compressedSize: UInt64
    /// Whether it is deflated (otherwise stored).
    @_spi(Core) public var isCompressed: Bool
    @_spi(Core) public var crc32: UInt32
}

@_spi(Core) public final class EntryReader {
    private let descriptor: FileDescriptor
    private let path: FilePath
    private let input: UnsafeMutableRawBufferPointer
    private let inflater: StreamInflater?
    private var entry: EntryLocation?
    private var nextOffset: UInt64 = 0
    private var remaining: UInt64 = 0
    private var crc = CRC32()
    private var isFinished = false

    @_spi(Core) public static let inputSize = 64 << 10

    /// - Parameters:
    ///   - descriptor: the bundle, open for reading; the reader does not close it.
    ///   - deflated: whether any entry to be read is deflated (only then is an inflater allocated).
    @_spi(Core) public init(descriptor: FileDescriptor, path: FilePath, deflated: Bool) throws {
        self.descriptor = descriptor
        self.path = path
        input = .allocate(byteCount: Self.inputSize, alignment: 64)
        if deflated {
            guard let inflater = StreamInflater() else {
                input.deallocate()
                throw DocumentError(.ioFailure, path: path, reason: "cannot allocate memory to inflate the bundle's entries")
            }
            self.inflater = inflater
        } else {
            inflater = nil
        }
    }

    deinit {
        input.deallocate()
    }

    /// Starts reading `entry`.
    @_spi(Core) public func start(_ entry: EntryLocation) {
        precondition(!entry.isCompressed || inflater != nil, "a deflated entry needs an inflater")
        self.entry = entry
        nextOffset = entry.dataOffset
        remaining = entry.compressedSize
        crc = CRC32()
        isFinished = false
        if entry.isCompressed, let inflater { inflater.reset() }
    }

    /// Fills `buffer` with the entry's next bytes; 0 at its end, once its stream and CRC-32 have been checked.
    @_spi(Core) public func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        guard let entry else { preconditionFailure("read() before start()") }
        if isFinished { return 0 }
        let count = entry.isCompressed ? try inflate(into: buffer, entry) : try copy(into: buffer)
        if count > 0 {
            crc.update(UnsafeRawBufferPointer(rebasing: buffer[..<count]))
            return count
        }
        isFinished = true
        guard crc.value == entry.crc32 else {
            throw DocumentError(.checksumMismatch, path: path, entry: entry.name,
                                reason: "the entry's CRC-32 does not match its data; the bundle is damaged, restore it from a backup")
        }
        return 0
    }

    private func copy(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        guard remaining > 0 else { return 0 }
        let wanted = Int(min(UInt64(buffer.count), remaining))
        let count = try pread(into: UnsafeMutableRawBufferPointer(rebasing: buffer[..<wanted]))
        remaining -= UInt64(count)
        return count
    }

    private func inflate(into buffer: UnsafeMutableRawBufferPointer, _ entry: EntryLocation) throws -> Int {
        let inflater = inflater!
        while true {
            if inflater.pending == 0 && remaining > 0 {
                let wanted = Int(min(UInt64(input.count), remaining))
                let count = try pread(into: UnsafeMutableRawBufferPointer(rebasing: input[..<wanted]))
                remaining -= UInt64(count)
                inflater.feed(UnsafeRawBufferPointer(rebasing: input[..<count]))
            }
            let pendingBefore = inflater.pending
            guard let (produced, finished) = inflater.inflate(into: buffer) else {
                throw DocumentError.corrupt("the entry's deflate data is not valid", path: path, entry: entry.name)
            }
            if finished {
                // > The stream must end exactly where the entry's bytes do: what follows it would be read by nobody.
                if remaining > 0 || inflater.hasTrailingBytes {
                    throw DocumentError.corrupt("the entry's deflate stream ends before its data does",
                                                path: path, entry: entry.name)
                }
                if produced > 0 { return produced }
                return 0
            }
            if produced > 0 { return produced }
            let pending = inflater.pending
            if remaining == 0 && pending == 0 {
                throw DocumentError.corrupt("the entry's deflate stream does not end where its data does",
                                            path: path, entry: entry.name)
            }
            guard pending < pendingBefore || pending == 0 else {  // no progress: never loop on it
                throw DocumentError.corrupt("the entry's deflate data is not valid", path: path, entry: entry.name)
            }
        }
    }

    /// Reads exactly `buffer.count` bytes at the next offset (the range lies inside the file, as validated).
    private func pread(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        var filled = 0
        while filled < buffer.count {
            let count: Int
            do {
                count = try descriptor.read(fromAbsoluteOffset: Int64(nextOffset) + Int64(filled),
                                            into: UnsafeMutableRawBufferPointer(rebasing: buffer[filled...]))
            } catch let error as Errno {
                throw DocumentError.io("cannot read the bundle", path: path, errno: error)
            }
            if count == 0 {
                throw DocumentError(.truncatedArchive, path: path, entry: entry?.name,
                                    reason: "the archive ends before the entry's data does; the bundle is truncated")
            }
            filled += count
        }
        nextOffset += UInt64(filled)
        return filled
    }
}
