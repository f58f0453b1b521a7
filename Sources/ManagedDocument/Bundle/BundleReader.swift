#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import SystemPackage

/// One entry of a bundle, as its validated central directory describes it.
public struct BundleEntry: Sendable, Equatable {
    /// The entry name.
    public var name: String
    /// Uncompressed size in bytes.
    public var size: UInt64
    /// Compressed size in bytes.
    public var compressedSize: UInt64
    /// Whether the entry is deflated (otherwise stored).
    public var isCompressed: Bool
    /// CRC-32 from the central directory.
    public var crc32: UInt32
    /// Offset of its local header in the file.
    public var offset: UInt64
    /// Whether it is an explicit folder entry.
    public var isDirectory: Bool
    var role: BundleLayout.Role
    /// Offset of its data (after the local header) in the file, once the local header has been checked.
    var dataOffset: UInt64 = 0
}

/// How a bundle's store is read, given its restart index (`store.deflateRestarts`, FORMAT.md 11.4): the index is a
/// hint, and the content (sizes, CRC-32, SHA-256) is the contract.
public enum RestartIndexUse: Sendable, Equatable, CustomStringConvertible {
    /// The bundle has none: the store is read in one stream.
    case absent
    /// It describes the entry's stream: the segments are inflated on every core, each checked. `identified` is false
    /// for an index from an older writer that did not record the stream's compressed size and CRC-32; such an index
    /// that turns out not to fit while the store is read is dropped for one stream.
    case used(segments: Int, identified: Bool)
    /// It describes another stream (another tool repacked the bundle): ignored, and the store is read in one stream,
    /// still bounded by its declared size and checked by CRC-32 and SHA-256.
    case stale(reason: String)

    /// One line for people: `used (N segments)`, `stale: …, read in one stream`, `none`.
    public var description: String {
        switch self {
        case .absent: return "none; the store is read in one stream"
        case .used(let segments, true): return "used: \(segments) segments, inflated on every core"
        case .used(let segments, false):
            return "used: \(segments) segments, inflated on every core (an older writer's index, which does not name its stream: dropped for one stream if it does not fit)"
        case .stale(let reason): return "stale, ignored (\(reason)); the store is read in one stream"
        }
    }
}

/// Opens a bundle as hostile input and proves it is a well-formed document before anything is inflated.
///
/// Creating a reader checks the archive's structure against the format (end records, central directory, every
/// local header, offsets and overlaps, names, entry kinds, compression, limits, the bare `mimetype` entry at byte
/// 30) and reads and checks `DocumentMetadata.json`. Nothing is extracted and nothing is written.
/// ``extract(into:)`` and ``verify(full:workingDirectory:)`` then stream the data, checking CRC-32s, sizes and
/// SHA-256s as they go.
///
/// ```swift
/// let reader = try BundleReader(at: "Notes.mdz")
/// print(reader.metadata.documentID, reader.entries.count)
/// let report = try reader.verify(full: true)
/// ```
///
/// ## Topics
/// - ``init(at:limits:)``
/// - ``extract(into:)``
/// - ``verify(full:workingDirectory:)``
public final class BundleReader: Sendable {
    /// The bundle's path.
    public let path: FilePath
    /// The bundle's size in bytes.
    public let fileSize: UInt64
    /// Every entry, in file order (`mimetype` first in a bundle as this package writes it).
    public let entries: [BundleEntry]
    /// The decoded and checked metadata.
    public let metadata: DocumentMetadata
    /// The content of the `mimetype` entry.
    public let mediaType: String
    /// Whether the archive uses zip64 end records.
    public let isZIP64: Bool
    /// The limits this reader enforces.
    public let limits: ReadingLimits
    /// What the store's restart index (`store.deflateRestarts`) is to this bundle, and so how the store is read.
    public let restartIndex: RestartIndexUse
    /// Whether the media type can be sniffed at byte 38 (`mimetype` first, stored, bare: FORMAT.md 4). A bundle that
    /// another zip tool repacked may not keep that layout; it is read all the same, and a save restores it.
    public let isMediaTypeSniffable: Bool
    private let layoutNotice: String?

    /// What a person should know about how this bundle is read, though nothing in it is refused: a `mimetype` entry
    /// that cannot be sniffed, a stale restart index. Empty for a bundle as this package writes it.
    public var notices: [String] {
        var notices: [String] = []
        if let layoutNotice { notices.append(layoutNotice) }
        if case .stale(let reason) = restartIndex {
            notices.append("the store's restart index is stale and ignored (\(reason)); the store is read in one stream")
        }
        return notices
    }
    /// The bundle file as it was when the reader opened it: every later read (libarchive's walk, the entries' data,
    /// the parallel inflater) goes through this descriptor, so a bundle replaced under ``path`` while it is read
    /// (a save beside a reader) is never mixed with the one that was checked.
    let descriptor: FileDescriptor

    /// Opens and checks a bundle.
    ///
    /// - Parameters:
    ///   - path: the bundle file.
    ///   - limits: bounds on entry count, names, sizes and ratios.
    /// - Throws: ``DocumentError``: ``DocumentError/Code/notFound``, ``DocumentError/Code/notAZipArchive``,
    ///   ``DocumentError/Code/notADocument`` (a zip, or a legacy SQLite store, that is not a bundle),
    ///   ``DocumentError/Code/corruptArchive``, ``DocumentError/Code/truncatedArchive``, the entry-name codes,
    ///   ``DocumentError/Code/limitExceeded``, ``DocumentError/Code/overlappingEntries``, the `mimetype` codes,
    ///   ``DocumentError/Code/invalidMetadata``, ``DocumentError/Code/metadataMismatch`` or
    ///   ``DocumentError/Code/newerFormat``.
    public init(at path: FilePath, limits: ReadingLimits = .default) throws {
        self.path = path
        self.limits = limits
        let descriptor: FileDescriptor
        do {
            descriptor = try FileDescriptor.open(path, .readOnly, options: [.closeOnExec])
        } catch let error as Errno {
            if error == .noSuchFileOrDirectory {
                throw DocumentError(.notFound, path: path, reason: "no such file", underlyingError: error)
            }
            throw DocumentError.io("cannot open the bundle", path: path, errno: error)
        }
        var isKept = false
        defer { if !isKept { try? descriptor.close() } }  // Squash close error of a read-only descriptor.
        var info = stat()
        guard fstat(descriptor.rawValue, &info) == 0 else {
            throw DocumentError.io("cannot read the file's status", path: path, errno: Errno(rawValue: errno))
        }
        guard info.st_mode & S_IFMT == S_IFREG else {
            throw DocumentError(.notADocument, path: path, reason: "is not a regular file")
        }
        let fileSize = UInt64(info.st_size)
        self.fileSize = fileSize
        func read(_ offset: UInt64, _ count: Int) throws -> [UInt8] {
            try FileSystem.read(descriptor, at: Int64(offset), count: count, path: path)
        }

        // End records and central directory.
        let end: ZipEndRecord
        do {
            end = try ZipEndRecord.locate(fileSize: fileSize, read: read)
        } catch let failure as ZipStructureFailure {
            let head = try read(0, 16)
            if StoreInspector.hasSQLiteHeader(head) {
                throw DocumentError(.notADocument, path: path,
                                    reason: "is a SQLite store, not a bundle; convert it with: docconvert convert \(path)")
            }
            if failure.kind == .notZip, head.count >= 4, head.readLE32(at: 0) == ZipLocalHeader.signature {
                // > It starts like a zip archive but its end records are gone: a bundle cut short.
                throw DocumentError(.truncatedArchive, path: path,
                                    reason: "starts like a zip archive but its end records are missing; the bundle is truncated, restore it from a backup")
            }
            throw Self.structureError(failure, path: path)
        }
        guard end.entryCount <= UInt64(limits.maxEntryCount) else {
            throw DocumentError(.limitExceeded, path: path,
                                reason: "declares \(end.entryCount) entries; the limit is \(limits.maxEntryCount)")
        }
        guard end.directorySize <= limits.maxDirectorySize else {
            throw DocumentError(.limitExceeded, path: path,
                                reason: "has a \(end.directorySize)-byte central directory; the limit is \(limits.maxDirectorySize)")
        }
        let directoryBytes = try read(end.directoryOffset, Int(end.directorySize))
        guard directoryBytes.count == Int(end.directorySize) else {
            throw DocumentError(.truncatedArchive, path: path, reason: "the central directory is cut short")
        }
        let records: [ZipCentralRecord]
        do {
            let decoded = try ZipCentralDirectory.decode(directoryBytes, count: end.entryCount)
            guard decoded.length == directoryBytes.count else {
                throw DocumentError.corrupt(
                    "the central directory holds \(directoryBytes.count - decoded.length) bytes beyond the \(end.entryCount) records the end record counts",
                    path: path)
            }
            records = decoded.records
        } catch let failure as ZipStructureFailure {
            throw Self.structureError(failure, path: path)
        }
        self.isZIP64 = end.isZIP64

        // Is it a bundle at all?
        let mimetypeName = Array(BundleLayout.mimetype.utf8)
        guard let mimetypeRecord = records.first(where: { $0.name == mimetypeName }) else {
            throw DocumentError(.notADocument, path: path,
                                reason: "is a zip archive but not a document bundle: it has no 'mimetype' entry")
        }
        // > Where `mimetype` lies is a promise to sniffers (FORMAT.md 4), not to readers: another zip tool may have
        // > repacked the bundle. Each way it is not at byte 38 is noted; the content is checked all the same.
        var layoutProblems: [String] = []
        if mimetypeRecord.localHeaderOffset != 0 { layoutProblems.append("'mimetype' is not the first entry") }

        // Every entry on its own.
        var names = Set<String>()
        var entries: [BundleEntry] = []
        var total: UInt64 = 0
        for record in records {
            let (name, role) = try BundleLayout.role(ofEntryNamed: record.name, maxLength: limits.maxNameLength,
                                                     in: path)
            guard names.insert(name).inserted else {
                throw DocumentError(.duplicateEntry, path: path, entry: name, reason: "appears twice in the archive")
            }
            if record.isEncrypted {
                throw DocumentError(.encryptedEntry, path: path, entry: name, reason: "is encrypted; bundles never are")
            }
            let isDirectory = role == .directory
            if let type = record.unixFileType, type != 0, type != (isDirectory ? 0o040000 : 0o100000) {
                let kind = type == 0o120000 ? "a symbolic link" : "not a regular file"
                throw DocumentError(.nonRegularEntry, path: path, entry: name, reason: "is \(kind); bundles hold only regular files")
            }
            if !isDirectory, record.unixFileType == nil, record.externalAttributes & 0x10 != 0 {
                throw DocumentError(.nonRegularEntry, path: path, entry: name, reason: "is marked as a folder but its name does not end in '/'")
            }
            if isDirectory, record.uncompressedSize != 0 {
                throw DocumentError.corrupt("a folder entry has content", path: path, entry: name)
            }
            guard record.method == 0 || record.method == 8 else {
                throw DocumentError(.unsupportedCompression, path: path, entry: name,
                                    reason: "uses compression method \(record.method); bundles use stored (0) or deflate (8)")
            }
            if record.method == 0, record.compressedSize != record.uncompressedSize {
                throw DocumentError.corrupt("a stored entry's sizes disagree", path: path, entry: name)
            }
            let (sum, overflow) = total.addingReportingOverflow(record.uncompressedSize)
            guard !overflow, sum <= limits.maxTotalUncompressedSize else {
                throw DocumentError(.limitExceeded, path: path, entry: name,
                                    reason: "the entries would inflate to more than \(limits.maxTotalUncompressedSize) bytes")
            }
            total = sum
            if record.uncompressedSize > 1 << 20,
               record.uncompressedSize / max(record.compressedSize, 1) > limits.maxCompressionRatio {
                throw DocumentError(.limitExceeded, path: path, entry: name,
                                    reason: "would inflate \(record.compressedSize) bytes to \(record.uncompressedSize), beyond the ratio limit of \(limits.maxCompressionRatio):1")
            }
            entries.append(BundleEntry(name: name, size: record.uncompressedSize,
                                       compressedSize: record.compressedSize, isCompressed: record.method == 8,
                                       crc32: record.crc32, offset: record.localHeaderOffset,
                                       isDirectory: isDirectory, role: role))
        }

        // A name cannot be both a file and a folder: 'a' and 'a/b' could never both be extracted.
        let fileNames = Set(entries.lazy.filter { !$0.isDirectory }.map(\.name))
        for entry in entries {
            var ancestor = Substring(entry.name.hasSuffix("/") ? String(entry.name.dropLast()) : entry.name)
            while let slash = ancestor.lastIndex(of: "/") {
                ancestor = ancestor[..<slash]
                if fileNames.contains(String(ancestor)) {
                    throw DocumentError(.entryNotAllowed, path: path, entry: entry.name,
                                        reason: "lies below the file entry '\(ancestor)'; a name cannot be both a file and a folder")
                }
            }
        }

        // Where the bytes lie: every local header agrees with the directory, and no two entries share bytes.
        entries.sort { $0.offset < $1.offset }
        var previousEnd: UInt64 = 0
        if let first = entries.first, first.offset != 0 {
            // > Bytes before the first entry: a stub prefixed to the archive (a self-extractor, or a file of another
            // > kind made to look like a bundle too). A bundle starts with an entry, whichever it is.
            throw DocumentError(.mimetypeNotFirst, path: path, entry: first.name,
                                reason: "the archive does not start with an entry: \(first.offset) bytes of something else come first")
        }
        var previousName = ""
        for (index, entry) in entries.enumerated() {
            if entry.offset < previousEnd {
                throw DocumentError(.overlappingEntries, path: path, entry: entry.name,
                                    reason: "shares bytes with '\(previousName)' (the shape of a zip bomb)")
            }
            let fixed = try read(entry.offset, ZipLocalHeader.fixedSize)
            guard fixed.count == ZipLocalHeader.fixedSize else {
                throw DocumentError(.truncatedArchive, path: path, entry: entry.name,
                                    reason: "the archive ends inside the entry's local header")
            }
            guard let local = ZipLocalHeader(fixed) else {
                throw DocumentError.corrupt("no local header where the directory says the entry starts",
                                            path: path, entry: entry.name)
            }
            let localName = try read(entry.offset + UInt64(ZipLocalHeader.fixedSize), local.nameLength)
            guard localName == Array(entry.name.utf8), local.method == (entry.isCompressed ? 8 : 0) else {
                throw DocumentError.corrupt("the local header disagrees with the central directory",
                                            path: path, entry: entry.name)
            }
            if local.flags & 0x0001 != 0 {
                throw DocumentError(.encryptedEntry, path: path, entry: entry.name, reason: "is encrypted; bundles never are")
            }
            // > The local header's CRC and sizes must agree with the directory. With a data descriptor (bit 3) they
            // > may be zero; 0xFFFFFFFF defers a size to the zip64 extra field.
            let deferred = local.flags & 0x0008 != 0
            func agrees(_ value: UInt32, _ expected: UInt64) -> Bool {
                value == 0xFFFF_FFFF || UInt64(value) == expected || (deferred && value == 0)
            }
            guard local.crc32 == entry.crc32 || (deferred && local.crc32 == 0),
                  agrees(local.compressedSize, entry.compressedSize), agrees(local.uncompressedSize, entry.size) else {
                throw DocumentError.corrupt("the local header's CRC-32 or sizes disagree with the central directory",
                                            path: path, entry: entry.name)
            }
            let dataStart = entry.offset + UInt64(ZipLocalHeader.fixedSize + local.nameLength + local.extraLength)
            let (dataEnd, overflow) = dataStart.addingReportingOverflow(entry.compressedSize)
            guard !overflow, dataEnd <= end.directoryOffset else {
                if !overflow && dataEnd <= fileSize && dataEnd > end.directoryOffset {
                    throw DocumentError(.overlappingEntries, path: path, entry: entry.name,
                                        reason: "runs into the central directory")
                }
                throw DocumentError(.truncatedArchive, path: path, entry: entry.name,
                                    reason: "the entry's data runs past the end of the archive")
            }
            if entry.role == .mimetype && entry.offset == 0 {
                if entry.isCompressed { layoutProblems.append("'mimetype' is compressed") }
                if local.extraLength != 0 { layoutProblems.append("'mimetype' has an extra field") }
                if local.flags & 0x0008 != 0 { layoutProblems.append("'mimetype' has a data descriptor") }
            }
            entries[index].dataOffset = dataStart
            previousEnd = dataEnd
            previousName = entry.name
        }

        // The media type.
        let mimetype = entries.first { $0.role == .mimetype }!
        guard (1...255).contains(mimetype.size) else {
            throw DocumentError(.invalidMimetype, path: path, entry: mimetype.name,
                                reason: "must hold a media type of 1 to 255 bytes")
        }
        self.isMediaTypeSniffable = layoutProblems.isEmpty
        self.layoutNotice = layoutProblems.isEmpty ? nil
            : layoutProblems.joined(separator: ", ") + ", so the media type cannot be sniffed at byte 38 (another zip tool repacked the bundle; a save lays it out again)"
        let content = layoutProblems.isEmpty ? try read(UInt64(BundleLayout.mediaTypeOffset), Int(mimetype.size))
            : try Self.readEntry(mimetype, from: descriptor, path: path)
        var crc = CRC32()
        crc.update(content)
        guard crc.value == mimetype.crc32 else {
            throw DocumentError(.checksumMismatch, path: path, entry: mimetype.name,
                                reason: "the CRC-32 does not match the media type's bytes; the bundle is damaged")
        }
        guard let mediaType = String(validating: content, as: UTF8.self), Self.isMediaType(content) else {
            throw DocumentError(.invalidMimetype, path: path, entry: mimetype.name,
                                reason: "does not hold a media type (ASCII 'type/subtype', no newline)")
        }
        self.mediaType = mediaType

        // Required entries.
        for required in [BundleLayout.metadata, BundleLayout.store] where !names.contains(required) {
            throw DocumentError(.missingEntry, path: path, entry: required,
                                reason: "is missing; every bundle has one")
        }
        self.entries = entries

        // Metadata.
        let metadataEntry = entries.first { $0.role == .metadata }!
        guard metadataEntry.size <= limits.maxMetadataSize else {
            throw DocumentError(.limitExceeded, path: path, entry: metadataEntry.name,
                                reason: "is \(metadataEntry.size) bytes; the limit is \(limits.maxMetadataSize)")
        }
        let metadataBytes = try Self.readEntry(metadataEntry, from: descriptor, path: path)
        let metadata = try DocumentMetadata.decode(metadataBytes, bundle: path)
        try Self.check(metadata, mediaType: mediaType, entries: entries, path: path)
        self.restartIndex = try Self.restartIndexUse(metadata.store.deflateRestarts,
                                                     store: entries.first { $0.role == .store }!, path: path)
        self.metadata = metadata
        self.descriptor = descriptor
        isKept = true
    }

    deinit {
        try? descriptor.close()  // Squash close error of a read-only descriptor.
    }

    /// The entry for a name.
    public func entry(named name: String) -> BundleEntry? {
        entries.first { $0.name == name }
    }

    /// The store entry.
    public var storeEntry: BundleEntry { entries.first { $0.role == .store }! }

    private static func isMediaType(_ bytes: [UInt8]) -> Bool {
        guard bytes.allSatisfy({ (0x21...0x7E).contains($0) }) else { return false }
        let parts = bytes.split(separator: 0x2F, omittingEmptySubsequences: false)
        return parts.count == 2 && !parts[0].isEmpty && !parts[1].isEmpty
    }

    /// Reads one small entry at the offset its checked local header gives, bounded by its directory size, its stream
    /// and CRC-32 checked (``EntryReader``).
    private static func readEntry(_ entry: BundleEntry, from descriptor: FileDescriptor, path: FilePath) throws -> [UInt8] {
        let reader = try EntryReader(descriptor: descriptor, path: path, deflated: entry.isCompressed)
        reader.start(entry)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Int(entry.size))
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 16, alignment: 16)
        defer { buffer.deallocate() }
        while true {
            let count = try reader.read(into: buffer)
            if count == 0 { break }
            bytes.append(contentsOf: buffer[0..<count])
            guard bytes.count <= entry.size else {
                throw DocumentError(.sizeMismatch, path: path, entry: entry.name,
                                    reason: "inflates to more than the \(entry.size) bytes its header declares")
            }
        }
        guard bytes.count == entry.size else {
            throw DocumentError(.sizeMismatch, path: path, entry: entry.name,
                                reason: "inflates to \(bytes.count) bytes, not the \(entry.size) its header declares")
        }
        return bytes
    }

    /// The metadata must describe exactly what the archive holds.
    private static func check(_ metadata: DocumentMetadata, mediaType: String, entries: [BundleEntry],
                              path: FilePath) throws {
        func mismatch(_ reason: String, entry: String? = BundleLayout.metadata) -> DocumentError {
            DocumentError(.metadataMismatch, path: path, entry: entry,
                          reason: reason + "; the metadata does not describe this bundle")
        }
        guard metadata.mediaType == mediaType else {
            throw DocumentError(.mediaTypeMismatch, path: path, entry: BundleLayout.mimetype,
                                reason: "says '\(mediaType)' but the metadata's mediaType is '\(metadata.mediaType)'")
        }
        guard metadata.store.entry == BundleLayout.store else {
            throw mismatch("'store.entry' is '\(metadata.store.entry)', not '\(BundleLayout.store)'")
        }
        let store = entries.first { $0.role == .store }!
        guard UInt64(clamping: metadata.store.size) == store.size, metadata.store.size >= 0 else {
            throw mismatch("'store.size' is \(metadata.store.size) but the entry holds \(store.size) bytes",
                           entry: BundleLayout.store)
        }
        guard isSHA256(metadata.store.sha256) else { throw mismatch("'store.sha256' is not a SHA-256") }
        var listed: [String: DocumentMetadata.Entry] = [:]
        for entry in metadata.entries {
            guard listed.updateValue(entry, forKey: entry.name) == nil else {
                throw mismatch("'entries' lists '\(entry.name)' twice")
            }
            guard isSHA256(entry.sha256) else { throw mismatch("'entries' has no SHA-256 for '\(entry.name)'") }
        }
        var content = 0
        for entry in entries {
            switch entry.role {
            case .externalData, .additionalContent:
                content += 1
                guard let described = listed[entry.name] else {
                    throw mismatch("the entry is not listed in the metadata", entry: entry.name)
                }
                guard described.size >= 0, UInt64(described.size) == entry.size else {
                    throw mismatch("the metadata says \(described.size) bytes but the entry holds \(entry.size)",
                                   entry: entry.name)
                }
            default: continue
            }
        }
        guard content == listed.count else {
            let missing = listed.keys.filter { name in !entries.contains { $0.name == name } }.sorted()
            throw mismatch("'entries' lists \(missing.first ?? "an entry") that the archive does not hold")
        }
    }

    /// Decides what the store's restart index is to this bundle (FORMAT.md 11.4): a hint, used when it describes
    /// the entry's stream, ignored when it describes another one (a repack), refused when it claims this stream and
    /// does not fit it.
    private static func restartIndexUse(_ restarts: DocumentMetadata.DeflateRestarts?, store: BundleEntry,
                                        path: FilePath) throws -> RestartIndexUse {
        guard let restarts else { return .absent }
        guard store.isCompressed else {
            return .stale(reason: "the store entry is stored, not deflated (the bundle was repacked)")
        }
        let isIdentified = restarts.compressedSize != nil || restarts.crc32 != nil
        if isIdentified, restarts.compressedSize != Int64(clamping: store.compressedSize) || restarts.crc32 != store.crc32 {
            return .stale(reason: "it describes a stream of \(restarts.compressedSize.map(String.init) ?? "?") compressed bytes with CRC-32 \(restarts.crc32.map { hex32($0) } ?? "?"), the entry holds \(store.compressedSize) with CRC-32 \(hex32(store.crc32)) (the bundle was repacked)")
        }
        if let problem = ParallelInflater.check(restarts, size: store.size, compressedSize: store.compressedSize) {
            guard isIdentified else { return .stale(reason: "it does not fit the entry: \(problem)") }
            throw DocumentError(.metadataMismatch, path: path, entry: BundleLayout.store,
                                reason: "'store.deflateRestarts' names this entry's stream but does not describe it: \(problem); the metadata does not describe this bundle")
        }
        return .used(segments: restarts.offsets.count, identified: isIdentified)
    }

    private static func hex32(_ value: UInt32) -> String {
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: 8 - digits.count) + digits
    }

    static func isSHA256(_ text: String) -> Bool {
        text.utf8.count == 64 && text.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }

    private static func structureError(_ failure: ZipStructureFailure, path: FilePath) -> DocumentError {
        switch failure.kind {
        case .notZip:
            return DocumentError(.notAZipArchive, path: path,
                                 reason: "is not a zip archive (\(failure.message)), so not a document bundle")
        case .truncated:
            return DocumentError(.truncatedArchive, path: path, reason: "the archive is truncated (\(failure.message))")
        case .corrupt:
            return DocumentError.corrupt(failure.message, path: path)
        case .limit:
            return DocumentError(.limitExceeded, path: path, reason: failure.message)
        }
    }
}
