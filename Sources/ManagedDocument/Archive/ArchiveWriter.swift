#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CArchive
import Crypto
import SystemPackage

/// What the writer learned about an entry while writing it.
struct EntryDigest: Equatable, Sendable {
    var name: String
    var size: Int64
    var sha256: String
    /// Where the entry's deflate stream starts afresh, when ``ParallelDeflater`` made it.
    var restarts: DeflateRestarts? = nil
}

/// Streams a zip archive through libarchive whose first entry is a bare `mimetype` entry.
///
/// Debian's libarchive 3.6.2 writes an extra field and a data descriptor for every entry, so the writer lays down
/// the `mimetype` entry's 30 + 8 + n bytes itself (content at byte 38), hands libarchive the rest of the file as a
/// stream starting after them, and at the end rewrites the central directory libarchive produced: the `mimetype`
/// record first, every local-header offset moved by the prefix, end records (zip64 when needed) computed anew.
///
/// Not `Sendable`: a libarchive handle belongs to one task.
final class ArchiveWriter {
    /// The name of the bare first entry that holds the media type (the convention of ODF and EPUB containers).
    static let mimetypeEntryName = "mimetype"

    private let handle: OpaquePointer  // struct archive *
    private let sink: Sink
    private let path: FilePath
    private var entryNames: [String] = []
    private let modificationTime: Int64
    private let mimetypeRecord: ZipCentralRecord
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
    ///     calling thread: ISA-L's levels (1-3) in restartable slices, zlib's (4-9) by libarchive in one plain stream.
    init(descriptor: FileDescriptor, path: FilePath, mediaType: String, deflateLevel: Int,
         modificationTime: Int64, forcesZIP64: Bool = false, compressionThreads: Int = 0) throws {
        precondition((0...9).contains(deflateLevel), "deflate level must be 0...9")
        self.compressionThreads = max(0, compressionThreads)
        guard let handle = archive_write_new() else { throw ArchiveFailure.outOfMemory }
        self.handle = handle  // from here on deinit frees it, even if init throws
        self.path = path
        self.modificationTime = modificationTime
        self.deflateLevel = deflateLevel
        self.forcesZIP64 = forcesZIP64
        self.sink = Sink(descriptor: descriptor, path: path)

        let name = Array(Self.mimetypeEntryName.utf8)
        let content = Array(mediaType.utf8)
        var crc = CRC32()
        crc.update(content)
        let dos = dosDateTime(secondsSince1970: modificationTime)
        let prefix = ZipLocalHeader.encodeStored(
            name: name, content: content, crc32: crc.value, time: dos.time, date: dos.date)
        var record = ZipCentralRecord()
        record.versionNeeded = 10
        record.modificationTime = dos.time
        record.modificationDate = dos.date
        record.crc32 = crc.value
        record.compressedSize = UInt64(content.count)
        record.uncompressedSize = UInt64(content.count)
        record.externalAttributes = UInt32(0o100644) << 16
        record.name = name
        self.mimetypeRecord = record
        sink.prefixLength = UInt64(prefix.count)
        try sink.write(prefix)

        try check(archive_write_set_format_zip(handle), "select the zip format")
        // > archive_write_set_bytes_per_block(0): "the archive is written unbuffered", so every byte written
        // > before archive_write_close() reaches the callback before the central directory does.
        try check(archive_write_set_bytes_per_block(handle, 0), "disable output blocking")
        if deflateLevel > 0 {
            try check(archive_write_set_format_option(handle, "zip", "compression-level", "\(deflateLevel)"),
                      "set the deflate level")
        } else {
            try check(archive_write_set_format_option(handle, "zip", "compression", "store"), "select storing")
        }
        if forcesZIP64 {
            try check(archive_write_set_format_option(handle, "zip", "zip64", "1"), "force zip64")
        }
        let client = Unmanaged.passUnretained(sink).toOpaque()
        try check(archive_write_open2(handle, client, nil, { _, client, buffer, length in
            guard let client, let buffer else { return -1 }
            let sink = Unmanaged<Sink>.fromOpaque(client).takeUnretainedValue()
            do {
                try sink.write(UnsafeRawBufferPointer(start: buffer, count: length))
                return la_ssize_t(length)
            } catch {
                sink.failure = error
                return -1
            }
        }, nil, nil), "open the archive for writing")
    }

    private let deflateLevel: Int
    private let forcesZIP64: Bool
    private let compressionThreads: Int
    /// Entries deflated by ``ParallelDeflater``, by their index among libarchive's entries: libarchive wrote their
    /// headers as those of stored entries and never saw their data, which went to the file beside it; their central
    /// records get the method, CRC-32 and sizes of the deflated entry they really are, and every later entry's
    /// local header offset moves by the bytes libarchive did not see.
    private var deflatedOutside: [Int: (crc32: UInt32, size: UInt64, compressedSize: UInt64)] = [:]

    /// Entries at least this large are deflated by ``ParallelDeflater`` on several threads when the writer has
    /// compression threads (smaller ones at ISA-L's levels 1-3 are deflated by it too, on the calling thread).
    static let parallelDeflateThreshold: Int64 = 1 << 20

    deinit { archive_write_free(handle) }

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
    @discardableResult
    func addEntry(named name: String, size: Int64, compressed: Bool, reuse: ParallelDeflater.Reuse? = nil,
                  read: (UnsafeMutableRawBufferPointer) throws -> Int) throws -> EntryDigest {
        precondition(!isFinished, "entry added after finish()")
        if let reuse {
            precondition(compressed && deflateLevel > 0, "only a deflated entry reuses segments")
            return try addDeflatedEntry(named: name, size: size, workers: compressionThreads, reuse: reuse, read: read)
        }
        if compressed && deflateLevel > 0 {
            let isLarge = size >= Self.parallelDeflateThreshold
            if isLarge && compressionThreads > 0 {
                return try addDeflatedEntry(named: name, size: size, workers: compressionThreads, read: read)
            }
            if DeflateEngine.isFast(deflateLevel) {  // libarchive deflates with zlib only
                return try addDeflatedEntry(named: name, size: size, workers: 0, read: read)
            }
        }
        let entry = try makeEntry(named: name, size: size)
        defer { archive_entry_free(entry) }
        if compressed && deflateLevel > 0 {
            try check(archive_write_zip_set_compression_deflate(handle), "select deflate for \(name)")
        } else {
            try check(archive_write_zip_set_compression_store(handle), "select storing for \(name)")
        }
        try check(archive_write_header(handle, entry), "write the header of \(name)")

        let pipeline = ChunkPipeline.forStream(ofSize: size)  // SHA-256 on a second thread while libarchive compresses
        var written: Int64 = 0
        while true {
            let buffer = pipeline.acquire()
            let count = try read(buffer)
            if count == 0 { break }
            guard written + Int64(count) <= size else {
                throw DocumentError(.sizeMismatch, path: path, entry: name,
                                    reason: "the source grew while it was being packed; nothing was replaced")
            }
            let chunk = UnsafeRawBufferPointer(rebasing: buffer[0..<count])
            pipeline.submit(count)  // hashing reads the chunk while libarchive does too; nobody writes it
            var offset = 0
            while offset < count {
                let result = archive_write_data(handle, chunk.baseAddress! + offset, count - offset)
                if result <= 0 {
                    if let failure = sink.failure { throw failure }
                    throw wrap(ArchiveFailure(status: Int32(result), operation: "write the data of \(name)",
                                              handle: handle))
                }
                offset += result
            }
            written += Int64(count)
        }
        guard written == size else {
            throw DocumentError(.sizeMismatch, path: path, entry: name,
                                reason: "the source shrank while it was being packed; nothing was replaced")
        }
        try check(archive_write_finish_entry(handle), "finish \(name)")
        entryNames.append(name)
        return EntryDigest(name: name, size: size, sha256: pipeline.finalize())
    }

    /// A regular file's libarchive entry; the caller frees it.
    private func makeEntry(named name: String, size: Int64) throws -> OpaquePointer {
        guard let entry = archive_entry_new() else { throw ArchiveFailure.outOfMemory }
        archive_entry_set_pathname_utf8(entry, name)
        archive_entry_set_filetype(entry, carchive_ae_ifreg())
        archive_entry_set_perm(entry, 0o644)
        // > Call archive_entry_set_size before archive_write_header: without it every entry becomes zip64.
        archive_entry_set_size(entry, size)
        archive_entry_set_mtime(entry, time_t(modificationTime), 0)
        return entry
    }

    /// Adds a deflated entry whose bytes ``ParallelDeflater`` compresses: on `workers` threads, or on this one with 0.
    ///
    /// libarchive cannot take data that is already compressed, so it is told the entry is stored, with the
    /// compressed bound as its size (so that it writes zip64 fields where the entry may need them), and is given
    /// none of the data: the compressed bytes go to the file beside it (copied file to file where segments are
    /// reused), so it neither copies nor checksums them again. Its local header and data descriptor are patched as
    /// they pass through the sink, and its central record in ``finish()``: method 8, the CRC-32 and sizes of the
    /// entry, sizes deferred to the descriptor exactly as libarchive writes its own deflated entries. The bundle is re-read and every entry inflated before
    /// it takes its name (by zlib, segment by segment, where the stream has restart points; by ISA-L's inflater
    /// otherwise), so a stream that does not inflate to these bytes never lands.
    private func addDeflatedEntry(named name: String, size: Int64, workers: Int, reuse: ParallelDeflater.Reuse? = nil,
                                  read: (UnsafeMutableRawBufferPointer) throws -> Int) throws -> EntryDigest {
        let declared = ParallelDeflater.compressedBound(forSize: size)
        let entry = try makeEntry(named: name, size: declared)
        defer { archive_entry_free(entry) }
        try check(archive_write_zip_set_compression_store(handle), "select storing for \(name)")
        let header = try sink.capture { try check(archive_write_header(handle, entry), "write the header of \(name)") }
        try sink.write(try Self.patchLocalHeader(header, size: UInt64(size), path: path, entry: name))

        let deflater = try ParallelDeflater(level: deflateLevel, workers: workers,
                                            restartInterval: ParallelDeflater.restartInterval(forSize: size), size: size)
        var written: Int64 = 0
        let result: ParallelDeflater.Result
        do {
            func grow(by count: Int64) throws {
                written += count
                guard written <= declared else {
                    throw DocumentError(.ioFailure, path: path, entry: name,
                                        reason: "the compressed data outgrew its bound; nothing was replaced")
                }
            }
            result = try deflater.compress(size: size, read: read, write: { chunk in
                try grow(by: Int64(chunk.count))
                try sink.write(chunk)
            }, copy: { source, range, origin in
                try grow(by: Int64(range.count))
                try sink.copy(from: source, range: range, origin: origin)
            }, reuse: reuse)
        } catch let failure as ParallelDeflater.Failure {
            switch failure {
            case .sizeMismatch(let grew):
                throw DocumentError(.sizeMismatch, path: path, entry: name,
                                    reason: "the source \(grew ? "grew" : "shrank") while it was being packed; nothing was replaced")
            case .compressor(let engine, let failure):
                throw DocumentError(.ioFailure, path: path, entry: name,
                                    reason: "\(engine) could not deflate the data (\(failure == .overflow ? "its output overflowed the bound" : "it refused")); nothing was replaced")
            case .outOfMemory:
                throw DocumentError(.ioFailure, path: path, entry: name,
                                    reason: "there is not enough memory for a compressor; nothing was replaced")
            }
        }
        let descriptor = try sink.capture { try check(archive_write_finish_entry(handle), "finish \(name)") }
        try sink.write(try Self.patchDataDescriptor(descriptor, crc32: result.crc32, size: UInt64(size),
                                                    compressedSize: UInt64(written), path: path, entry: name))
        deflatedOutside[entryNames.count] = (result.crc32, UInt64(size), UInt64(written))
        entryNames.append(name)
        // > Restarts are recorded where readers gain from them: entries that readers inflate on several cores.
        // > The index names the stream it describes (compressed size, CRC-32), so a reader can tell it from a repack.
        var restarts = result.restarts
        restarts.compressedSize = Int64(written)
        restarts.crc32 = result.crc32
        return EntryDigest(name: name, size: size, sha256: result.sha256,
                           restarts: size >= Self.parallelDeflateThreshold || reuse != nil ? restarts : nil)
    }

    /// libarchive's local header of a stored entry of the declared bound, made that of a deflated entry of `size`
    /// bytes whose CRC-32 and compressed size follow in the data descriptor.
    static func patchLocalHeader(_ bytes: [UInt8], size: UInt64, path: FilePath, entry: String) throws -> [UInt8] {
        var header = bytes
        func unexpected(_ what: String) -> DocumentError {
            DocumentError(.ioFailure, path: path, entry: entry, reason: "libarchive wrote an unexpected local header: \(what)")
        }
        guard let fixed = ZipLocalHeader(header), fixed.method == 0, fixed.flags & 0x0008 != 0,
              header.count == ZipLocalHeader.fixedSize + fixed.nameLength + fixed.extraLength else {
            throw unexpected("not a stored entry with a data descriptor")
        }
        header.writeLE(max(header.readLE16(at: 4), 20), at: 4)  // version needed: 2.0, deflate (4.5 stays for zip64)
        header.writeLE(UInt16(8), at: 8)  // method: deflate
        header.writeLE(UInt32(0), at: 14)  // CRC-32: in the data descriptor
        let wide = fixed.compressedSize == UInt32.max
        if wide {
            // Sizes in the zip64 extra field: uncompressed, then compressed.
            var position = ZipLocalHeader.fixedSize + fixed.nameLength
            let end = position + fixed.extraLength
            var patched = false
            while position + 4 <= end {
                let id = header.readLE16(at: position), length = Int(header.readLE16(at: position + 2))
                if id == 0x0001, length >= 16 {
                    header.writeLE(size, at: position + 4)
                    header.writeLE(UInt64(0), at: position + 12)
                    patched = true
                }
                position += 4 + length
            }
            guard patched else { throw unexpected("zip64 sizes without a zip64 extra field") }
        } else {
            guard size < UInt64(UInt32.max) else { throw unexpected("no zip64 field for a large entry") }
            header.writeLE(UInt32(0), at: 18)
            header.writeLE(UInt32(size), at: 22)
        }
        return header
    }

    /// libarchive's data descriptor of an entry it saw no data of, given the CRC-32 and sizes of the entry.
    static func patchDataDescriptor(_ bytes: [UInt8], crc32: UInt32, size: UInt64, compressedSize: UInt64,
                                    path: FilePath, entry: String) throws -> [UInt8] {
        var descriptor = bytes
        switch descriptor.count {
        case 16 where descriptor.readLE32(at: 0) == 0x0807_4b50 && descriptor.readLE32(at: 8) == 0:
            guard size < UInt64(UInt32.max), compressedSize < UInt64(UInt32.max) else { break }
            descriptor.writeLE(crc32, at: 4)
            descriptor.writeLE(UInt32(compressedSize), at: 8)
            descriptor.writeLE(UInt32(size), at: 12)
            return descriptor
        case 24 where descriptor.readLE32(at: 0) == 0x0807_4b50 && descriptor.readLE64(at: 8) == 0:
            descriptor.writeLE(crc32, at: 4)
            descriptor.writeLE(compressedSize, at: 8)
            descriptor.writeLE(size, at: 16)
            return descriptor
        default:
            break
        }
        throw DocumentError(.ioFailure, path: path, entry: entry,
                            reason: "libarchive wrote an unexpected data descriptor (\(descriptor.count) bytes)")
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
        sink.isCapturing = true
        try check(archive_write_close(handle), "write the central directory")
        sink.isCapturing = false
        let prefix = sink.prefixLength
        let directoryOffset = sink.physicalOffset
        let decoded: [ZipCentralRecord]
        do {
            decoded = try ZipCentralDirectory.decode(sink.captured, count: UInt64(entryNames.count)).records
        } catch let failure as ZipStructureFailure {
            throw DocumentError(.ioFailure, path: path,
                                reason: "libarchive wrote an unexpected central directory: \(failure.message)")
        }
        var directory = mimetypeRecord.encoded()
        var unseen: UInt64 = 0  // bytes written beside libarchive before the entry at hand
        for (index, var record) in decoded.enumerated() {
            record.localHeaderOffset += prefix + unseen
            if let deflated = deflatedOutside[index] {
                guard record.compressedSize == 0 else {
                    throw DocumentError(.ioFailure, path: path,
                                        reason: "libarchive recorded data it was not given for \(entryNames[index])")
                }
                record.method = 8
                record.versionNeeded = max(record.versionNeeded, 20)
                record.crc32 = deflated.crc32
                record.uncompressedSize = deflated.size
                record.compressedSize = deflated.compressedSize
                unseen += deflated.compressedSize
            }
            directory += record.encoded(forcesZIP64: forcesZIP64)
        }
        try sink.write(directory)
        try sink.write(ZipEndRecord.encode(entryCount: UInt64(decoded.count + 1),
                                           directorySize: UInt64(directory.count),
                                           directoryOffset: directoryOffset, forcesZIP64: forcesZIP64))
        try sink.flush()
    }

    private func check(_ status: Int32, _ operation: String) throws {
        guard status != ARCHIVE_OK else { return }
        if let failure = sink.failure { throw failure }
        throw wrap(ArchiveFailure(status: status, operation: operation, handle: handle))
    }

    private func wrap(_ failure: ArchiveFailure) -> DocumentError {
        DocumentError(.ioFailure, path: path, reason: "cannot write the archive", underlyingError: failure)
    }
}

/// Where libarchive's bytes go: a 128 KiB buffer in front of the file, or, while the directory is written, memory.
///
/// Every ``writebackInterval`` bytes that reach the file, the kernel is asked to start writing them to disk
/// (`sync_file_range`, without waiting), so that the fsync before the rename finds most of the bundle on disk
/// already instead of writing all of it then.
private final class Sink {
    static let writebackInterval: Int64 = 8 << 20

    let descriptor: FileDescriptor
    let path: FilePath
    var prefixLength: UInt64 = 0
    /// Bytes written to the file (or buffered for it) so far.
    private(set) var physicalOffset: UInt64 = 0
    /// Bytes that reached the file, and how many of them were handed to the kernel's writeback.
    private var fileOffset: Int64 = 0
    private var writebackOffset: Int64 = 0
    var isCapturing = false
    var captured: [UInt8] = []
    var failure: (any Error)?
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
        if isCapturing {
            captured.append(contentsOf: bytes)
            guard captured.count <= 256 << 20 else {
                throw DocumentError(.limitExceeded, path: path, reason: "the central directory is larger than 256 MiB")
            }
            return
        }
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
        precondition(!isCapturing, "a copy while libarchive's bytes are held back")
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

    /// What libarchive writes during `body`, held back so the caller can patch it before it goes to the file.
    func capture(_ body: () throws -> Void) throws -> [UInt8] {
        precondition(!isCapturing, "nested capture")
        isCapturing = true
        defer {
            isCapturing = false
            captured.removeAll()
        }
        try body()
        return captured
    }

    func flush() throws {
        try copyPending()
        guard !buffer.isEmpty else { return }
        try buffer.withUnsafeBytes { try writeToFile($0) }
        buffer.removeAll(keepingCapacity: true)
    }
}
