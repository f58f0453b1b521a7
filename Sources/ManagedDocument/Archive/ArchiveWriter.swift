#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CArchive  // sync_file_range(2), declared by its shim
@_spi(Core) import MDZCore
import SystemPackage

/// What the writer learned about an entry while writing it.
struct EntryDigest: Equatable, Sendable {
    var name: String
    var size: Int64
    /// The SHA-256 of its bytes; `nil` when the writer was asked not to compute it (a version 2 store, checked by its
    /// segment digests) or when it reused segments.
    var sha256: String?
    /// Where the entry's deflate stream starts afresh, when ``ParallelDeflater`` made it.
    var restarts: DeflateRestarts? = nil
}

/// Streams a zip archive whose first entry is a bare `mimetype` entry, writing every header itself.
///
/// Every byte of the file comes from the encoders in `ZipDirectory.swift` (local headers, data descriptors, central
/// records, end records) and from ``ParallelDeflater`` (deflated data), so the layout of a bundle does not depend on
/// any library's release: the `mimetype` entry at byte 0 with no extra field and no data descriptor, then each entry
/// as a local header (flag bit 3, the extended-timestamp field, a zip64 field where a size may need 64 bits), its
/// data and a data descriptor, then the central directory (the `mimetype` record first) and the end records (zip64
/// when needed). libarchive stays the reader: every bundle is re-read through it before it takes its name.
///
/// Not `Sendable`: one writer belongs to one task.
final class ArchiveWriter {
    /// The name of the bare first entry that holds the media type (``ZipContainer/mimetypeEntryName``).
    static let mimetypeEntryName = ZipContainer.mimetypeEntryName

    /// Entries at least this large are deflated on several threads when the writer has compression threads (smaller
    /// ones are deflated by ``ParallelDeflater`` on the calling thread).
    static let parallelDeflateThreshold: Int64 = 1 << 20

    private let sink: ArchiveSink
    private let path: FilePath
    private let deflateLevel: Int
    private let forcesZIP64: Bool
    private let compressionThreads: Int
    private let modificationTime: Int64
    private let dosTime: (time: UInt16, date: UInt16)
    /// The central directory's records, in the order their entries were written.
    private var records: [ZipCentralRecord] = []
    private var isFinished = false

    /// - Parameters:
    ///   - descriptor: an open, empty file; the writer writes sequentially from offset 0 and does not close it.
    ///   - path: the file's path, for errors.
    ///   - mediaType: the `mimetype` entry's content.
    ///   - deflateLevel: 1...9 for deflate; 0 stores every entry.
    ///   - modificationTime: seconds since 1970 recorded for every entry.
    ///   - forcesZIP64: write zip64 fields and end records even when no size needs them (for tests and for
    ///     readers that want to check their zip64 support).
    ///   - compressionThreads: threads that deflate one large entry at once (``ParallelDeflater``); 0 deflates on the
    ///     calling thread. At most the cores this process may use are started: more would deflate no faster, and
    ///     each holds its own buffers.
    /// Whether the restart interval grows with an entry's size (``ParallelDeflater/restartInterval(forSize:growing:)``):
    /// as format version 2 writes it; version 3 restarts every 128 KiB at any size.
    let restartsGrow: Bool

    init(descriptor: FileDescriptor, path: FilePath, mediaType: String, deflateLevel: Int,
         modificationTime: Int64, forcesZIP64: Bool = false, compressionThreads: Int = 0,
         restartsGrow: Bool = false) throws {
        precondition((0...9).contains(deflateLevel), "deflate level must be 0...9")
        self.path = path
        self.restartsGrow = restartsGrow
        self.deflateLevel = deflateLevel
        self.forcesZIP64 = forcesZIP64
        self.compressionThreads = min(max(0, compressionThreads), ParallelDeflater.availableCores)
        self.modificationTime = modificationTime
        self.dosTime = dosDateTime(secondsSince1970: modificationTime)
        self.sink = ArchiveSink(descriptor: descriptor, path: path)

        let name = Array(Self.mimetypeEntryName.utf8)
        let content = Array(mediaType.utf8)
        var crc = CRC32()
        crc.update(content)
        var record = ZipCentralRecord()
        record.versionNeeded = 10
        record.modificationTime = dosTime.time
        record.modificationDate = dosTime.date
        record.crc32 = crc.value
        record.compressedSize = UInt64(content.count)
        record.uncompressedSize = UInt64(content.count)
        record.externalAttributes = Self.regularFileAttributes
        record.name = name
        records.append(record)
        try sink.write(ZipLocalHeader.encodeStored(name: name, content: content, crc32: crc.value,
                                                   time: dosTime.time, date: dosTime.date))
    }

    /// A regular file, `rw-r--r--`, in the high half of the external attributes (FORMAT.md 7).
    private static let regularFileAttributes = UInt32(0o100644) << 16

    /// Adds an entry, pulling its bytes from `read` until it returns 0, hashing them on the way.
    ///
    /// - Parameters:
    ///   - name: the entry name (already validated against the format).
    ///   - size: the exact number of bytes `read` will produce.
    ///   - compressed: deflate (at the writer's level) or store.
    ///   - reuse: restart segments whose compressed bytes are copied from an earlier stream instead of being
    ///     compressed (``ParallelDeflater/Reuse``); the entry is then deflated in restartable slices whatever the
    ///     entry's size and the writer's threads.
    ///   - read: fills the buffer and returns how many bytes it wrote; 0 at the end.
    ///   - hashing: compute the SHA-256 of the entry's bytes (``EntryDigest/sha256``).
    @discardableResult
    func addEntry(named name: String, size: Int64, compressed: Bool, reuse: ParallelDeflater.Reuse? = nil,
                  hashing: Bool = true, read: (UnsafeMutableRawBufferPointer) throws -> Int) throws -> EntryDigest {
        precondition(!isFinished, "entry added after finish()")
        precondition(size >= 0, "an entry's size is never negative")
        let deflates = compressed && deflateLevel > 0
        precondition(reuse == nil || deflates, "only a deflated entry reuses segments")
        // > Sizes take 64 bits in the local header and the descriptor when the entry (or, deflated, its compressed
        // > bound) may reach 0xFFFFFFFF: the descriptor's width must be known before the data is written.
        let bound = deflates ? ParallelDeflater.compressedBound(forSize: size) : size
        let entry = ZipStreamedEntry(
            name: Array(name.utf8), method: deflates ? 8 : 0, size: UInt64(size), time: dosTime.time,
            date: dosTime.date, unixTime: modificationTime,
            isZIP64: forcesZIP64 || UInt64(bound) >= ZipStreamedEntry.classicLimit)
        let offset = sink.physicalOffset
        try sink.write(entry.localHeader())
        let written: (crc32: UInt32, compressedSize: UInt64, digest: EntryDigest)
        if deflates {
            written = try writeDeflated(named: name, size: size, bound: bound, reuse: reuse, hashing: hashing,
                                        read: read)
        } else {
            let (crc, sha256) = try writeStored(named: name, size: size, hashing: hashing, read: read)
            written = (crc, UInt64(size), EntryDigest(name: name, size: size, sha256: sha256))
        }
        try sink.write(entry.dataDescriptor(crc32: written.crc32, compressedSize: written.compressedSize))
        var record = entry.centralRecord(crc32: written.crc32, compressedSize: written.compressedSize,
                                         localHeaderOffset: offset)
        record.externalAttributes = Self.regularFileAttributes
        records.append(record)
        return written.digest
    }

    /// Writes a stored entry's bytes as they come, its CRC-32 computed on this thread and its SHA-256 on a second
    /// one (``ChunkPipeline``).
    private func writeStored(named name: String, size: Int64, hashing: Bool,
                             read: (UnsafeMutableRawBufferPointer) throws -> Int)
    throws -> (crc32: UInt32, sha256: String?) {
        let pipeline = ChunkPipeline.forStream(ofSize: size,
                                               hashing: ChunkPipeline.Hashing(whole: hashing, segmentInterval: nil))
        var crc = CRC32()
        var written: Int64 = 0
        while true {
            let buffer = pipeline.acquire()
            let count = try read(buffer)
            if count == 0 { break }
            guard Int64(count) <= size - written else {
                throw DocumentError(.sizeMismatch, path: path, entry: name,
                                    reason: "the source grew while it was being packed; nothing was replaced")
            }
            let chunk = UnsafeRawBufferPointer(rebasing: buffer[0..<count])
            pipeline.submit(count)  // hashing reads the chunk while this thread checksums and writes it; nobody writes it
            crc.update(chunk)
            try sink.write(chunk)
            written += Int64(count)
        }
        guard written == size else {
            throw DocumentError(.sizeMismatch, path: path, entry: name,
                                reason: "the source shrank while it was being packed; nothing was replaced")
        }
        return (crc.value, pipeline.finalizeDigests().sha256)
    }

    /// Writes a deflated entry's stream, which ``ParallelDeflater`` compresses: on the writer's threads for a large
    /// entry or one that reuses segments, on this one otherwise. Reused segments are copied file to file.
    private func writeDeflated(named name: String, size: Int64, bound: Int64, reuse: ParallelDeflater.Reuse?,
                               hashing: Bool, read: (UnsafeMutableRawBufferPointer) throws -> Int)
    throws -> (crc32: UInt32, compressedSize: UInt64, digest: EntryDigest) {
        let isLarge = size >= Self.parallelDeflateThreshold
        let deflater = try ParallelDeflater(level: deflateLevel, workers: isLarge || reuse != nil ? compressionThreads : 0,
                                            restartInterval: ParallelDeflater.restartInterval(forSize: size, growing: restartsGrow),
                                            size: size)
        var written: Int64 = 0
        func grow(by count: Int64) throws {
            written += count
            guard written <= bound else {
                throw DocumentError(.ioFailure, path: path, entry: name,
                                    reason: "the compressed data outgrew its bound; nothing was replaced")
            }
        }
        let result: ParallelDeflater.Result
        do {
            result = try deflater.compress(size: size, read: read, write: { chunk in
                try grow(by: Int64(chunk.count))
                try sink.write(chunk)
            }, copy: { source, range, origin in
                try grow(by: Int64(range.count))
                try sink.copy(from: source, range: range, origin: origin)
            }, reuse: reuse, hashing: hashing)
        } catch let failure as ParallelDeflater.Failure {
            throw error(for: failure, entry: name)
        }
        // > Restarts are recorded where readers gain from them: entries that readers inflate on several cores.
        // > The index names the stream it describes (compressed size, CRC-32), so a reader can tell it from a repack.
        var restarts = result.restarts
        restarts.compressedSize = written
        restarts.crc32 = result.crc32
        let digest = EntryDigest(name: name, size: size, sha256: result.sha256,
                                 restarts: isLarge || reuse != nil ? restarts : nil)
        return (result.crc32, UInt64(written), digest)
    }

    /// What a compressor's failure means to the caller, in plain words.
    private func error(for failure: ParallelDeflater.Failure, entry name: String) -> DocumentError {
        switch failure {
        case .sizeMismatch(let grew):
            return DocumentError(.sizeMismatch, path: path, entry: name,
                                 reason: "the source \(grew ? "grew" : "shrank") while it was being packed; nothing was replaced")
        case .compressor(let engine, let failure):
            return DocumentError(.ioFailure, path: path, entry: name,
                                 reason: "\(engine) could not deflate the data (\(failure == .overflow ? "its output overflowed the bound" : "it refused")); nothing was replaced")
        case .outOfMemory:
            return DocumentError(.ioFailure, path: path, entry: name,
                                 reason: "there is not enough memory for a compressor; nothing was replaced")
        }
    }

    /// Adds an entry from bytes in memory.
    @discardableResult
    func addEntry(named name: String, bytes: [UInt8], compressed: Bool) throws -> EntryDigest {
        var offset = 0
        return try addEntry(named: name, size: Int64(bytes.count), compressed: compressed) { buffer in
            let count = min(buffer.count, bytes.count - offset)
            bytes.withUnsafeBytes { source in
                buffer.baseAddress!.copyMemory(from: source.baseAddress! + offset, byteCount: count)
            }
            offset += count
            return count
        }
    }

    /// Writes the central directory and end records. The descriptor is left open and not yet synced.
    func finish() throws {
        precondition(!isFinished, "finish() called twice")
        isFinished = true
        let directoryOffset = sink.physicalOffset
        var directory: [UInt8] = []
        for (index, record) in records.enumerated() {
            // > The `mimetype` record stays as bare as its local header (FORMAT.md 4).
            directory += record.encoded(forcesZIP64: forcesZIP64 && index > 0)
        }
        try sink.write(directory)
        try sink.write(ZipEndRecord.encode(entryCount: UInt64(records.count), directorySize: UInt64(directory.count),
                                           directoryOffset: directoryOffset, forcesZIP64: forcesZIP64))
        try sink.flush()
    }
}

/// Where the writer's bytes go: a 128 KiB buffer in front of the file, and ranges copied file to file.
///
/// Every ``writebackInterval`` bytes that reach the file, the kernel is asked to start writing them to disk
/// (`sync_file_range`, without waiting), so that the fsync before the rename finds most of the bundle on disk
/// already instead of writing all of it then.
private final class ArchiveSink {
    static let writebackInterval: Int64 = 8 << 20

    let descriptor: FileDescriptor
    let path: FilePath
    /// Bytes written to the file (or buffered for it) so far.
    private(set) var physicalOffset: UInt64 = 0
    /// Bytes that reached the file, and how many of them were handed to the kernel's writeback.
    private var fileOffset: Int64 = 0
    private var writebackOffset: Int64 = 0
    private var buffer: [UInt8] = []
    private let bufferLimit = 128 << 10

    init(descriptor: FileDescriptor, path: FilePath) {
        self.descriptor = descriptor
        self.path = path
        buffer.reserveCapacity(bufferLimit)
    }

    func write(_ bytes: [UInt8]) throws {
        try bytes.withUnsafeBytes { try write($0) }
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws {
        physicalOffset += UInt64(bytes.count)
        try copyPending()
        if buffer.count + bytes.count > bufferLimit { try flush() }
        if bytes.count >= bufferLimit {
            try writeToFile(bytes)
        } else {
            buffer.append(contentsOf: bytes)
        }
    }

    private func writeToFile(_ bytes: UnsafeRawBufferPointer) throws {
        try FileSystem.writeAll(descriptor, bytes, path: path)
        try wroteToFile(Int64(bytes.count))
    }

    /// Counts bytes that reached the file and hands whole intervals of them to the kernel's writeback.
    private func wroteToFile(_ count: Int64) throws {
        fileOffset += count
        if fileOffset - writebackOffset >= Self.writebackInterval {
            // > Only a hint: where the kernel cannot, the fsync before the rename writes everything as before.
            _ = sync_file_range(descriptor.rawValue, writebackOffset, fileOffset - writebackOffset, 2 /* SYNC_FILE_RANGE_WRITE */)
            writebackOffset = fileOffset
        }
    }

    /// Copies `range` of `source` to the file (`origin` names the source in errors). Ranges that follow each other in
    /// the same source are copied in one go, up to ``copyChunk`` bytes, before the next bytes written.
    func copy(from source: FileDescriptor, range: Range<Int64>, origin: FilePath) throws {
        physicalOffset += UInt64(range.count)
        if let pending = pendingCopy, pending.source == source, pending.range.upperBound == range.lowerBound,
           pending.range.count < Self.copyChunk {
            pendingCopy = (source, pending.range.lowerBound..<range.upperBound, origin)
            return
        }
        try flush()
        pendingCopy = (source, range, origin)
    }

    /// The most bytes held back for one copy: copies start while the caller still decides what comes next.
    static let copyChunk = 8 << 20

    /// A copy ``copy(from:range:origin:)`` holds back until the next write.
    private var pendingCopy: (source: FileDescriptor, range: Range<Int64>, origin: FilePath)?
    private lazy var copyBuffer = [UInt8](repeating: 0, count: 1 << 20)

    /// Copies the pending range, read with `pread` and written straight to the file (the buffer is empty).
    private func copyPending() throws {
        guard let (source, range, origin) = pendingCopy else { return }
        pendingCopy = nil
        var position = range.lowerBound
        while position < range.upperBound {
            let wanted = Int(min(range.upperBound - position, Int64(copyBuffer.count)))
            try copyBuffer.withUnsafeMutableBytes { buffer in
                let chunk = UnsafeMutableRawBufferPointer(rebasing: buffer[..<wanted])
                guard try FileSystem.read(source, at: position, into: chunk, path: origin) == wanted else {
                    throw DocumentError(.truncatedArchive, path: origin,
                                        reason: "the file ends before the bytes to copy do; nothing was replaced")
                }
                try writeToFile(UnsafeRawBufferPointer(chunk))
            }
            position += Int64(wanted)
        }
    }

    func flush() throws {
        try copyPending()
        guard !buffer.isEmpty else { return }
        try buffer.withUnsafeBytes { try writeToFile($0) }
        buffer.removeAll(keepingCapacity: true)
    }
}
