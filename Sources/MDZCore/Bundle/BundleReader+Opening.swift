#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import SystemPackage

/// The bundle file a reader opened: one descriptor for the reader's whole life (FORMAT.md section 15: a reader reads
/// one file), its size, and positional reads of it.
@_spi(Core) public struct OpenedBundle: Sendable {
    @_spi(Core) public let path: FilePath
    @_spi(Core) public let descriptor: FileDescriptor
    @_spi(Core) public let size: UInt64
    /// The file's identity before anything of it was read: what an unchanged-bundle proof starts from.
    @_spi(Core) public let identity: FileIdentity

    /// Opens `path`, which must be a regular file (FORMAT.md 15.1).
    ///
    /// The file is opened without blocking, so that a FIFO (which would wait for a writer), a socket or a device is
    /// refused at once rather than waited on; blocking reads are restored once the file is known to be regular.
    @_spi(Core) public static func open(_ path: FilePath) throws -> OpenedBundle {
        let descriptor: FileDescriptor
        do {
            descriptor = try FileDescriptor.open(path, .readOnly, options: [.nonBlocking, .closeOnExec])
        } catch let error as Errno {
            if error == .noSuchFileOrDirectory {
                throw DocumentError(.notFound, path: path, reason: "no such file", underlyingError: error)
            }
            if error == .noSuchAddressOrDevice {  // ENXIO: a socket, or a device with nothing behind it
                throw DocumentError(.notADocument, path: path, reason: "is not a regular file")
            }
            throw DocumentError.io("cannot open the bundle", path: path, errno: error)
        }
        let status: Stat
        do { status = try Stat(descriptor) } catch {
            try? descriptor.close()  // Squash close error: the status error is what counts.
            throw DocumentError.io("cannot read the file's status", path: path, errno: error)
        }
        guard status.kind == .regular else {
            try? descriptor.close()  // Squash close error of a read-only descriptor.
            throw DocumentError(.notADocument, path: path, reason: "is not a regular file")
        }
        // > O_NONBLOCK has no effect on regular files (open(2)); it is cleared all the same, so that no read of the
        // > bundle can ever return EAGAIN.
        let flags = fcntl(descriptor.rawValue, F_GETFL)
        guard flags >= 0, fcntl(descriptor.rawValue, F_SETFL, flags & ~O_NONBLOCK) == 0 else {
            let failure = Errno(rawValue: errno)
            try? descriptor.close()  // Squash close error: the fcntl error is what counts.
            throw DocumentError.io("cannot set the file's blocking mode", path: path, errno: failure)
        }
        return OpenedBundle(path: path, descriptor: descriptor, size: UInt64(status.size), identity: status.identity)
    }

    /// `count` bytes at `offset`, fewer at the end of the file: none at an offset past it, however large (offsets
    /// come from the archive's records, up to 2⁶⁴ − 1 in a zip64 field), and never more than the file holds there
    /// (counts come from them too).
    @_spi(Core) public func read(_ offset: UInt64, _ count: Int) throws -> [UInt8] {
        guard offset < size, let start = Int64(exactly: offset) else { return [] }
        return try FileSystem.read(descriptor, at: start, count: Int(min(UInt64(max(0, count)), size - offset)),
                                   path: path)
    }
}

/// The stages of opening a bundle, one function each, in the order of FORMAT.md section 15 (the first failure decides
/// the error code). ``BundleReader/init(at:limits:)`` reads as the list of them.
extension BundleReader {
    /// 15.1 and 15.2: the end-of-central-directory record (and the zip64 ones), within the limits. A file without
    /// them is named for what it is: a loose SQLite store, a truncated bundle, or not a zip archive.
    @_spi(Core) public static func endRecords(of file: OpenedBundle, limits: ReadingLimits) throws -> ZipEndRecord {
        let path = file.path
        let end: ZipEndRecord
        do {
            end = try ZipEndRecord.locate(fileSize: file.size, read: file.read)
        } catch let failure as ZipStructureFailure {
            let head = try file.read(0, 16)
            if StoreHeader.hasMagic(head) {
                throw DocumentError(.notADocument, path: path,
                                    reason: "is a SQLite store, not a bundle; convert it into one first: LegacyConverter().convert(storeAt:to:), or list it in Document.OpenOptions.legacyStoreLocations to convert it when the document opens")
            }
            if failure.kind == .notZip, head.count >= 4, head.readLE32(at: 0) == ZipLocalHeader.signature {
                // > It starts like a zip archive but its end records are gone: a bundle cut short.
                throw DocumentError(.truncatedArchive, path: path,
                                    reason: "starts like a zip archive but its end records are missing; the bundle is truncated, restore it from a backup")
            }
            throw structureError(failure, path: path)
        }
        guard end.entryCount <= UInt64(clamping: limits.maxEntryCount) else {
            throw DocumentError(.limitExceeded, path: path,
                                reason: "declares \(end.entryCount) entries; the limit is \(limits.maxEntryCount)")
        }
        guard end.directorySize <= limits.maxDirectorySize else {
            throw DocumentError(.limitExceeded, path: path,
                                reason: "has a \(end.directorySize)-byte central directory; the limit is \(limits.maxDirectorySize)")
        }
        return end
    }

    /// 15.2: the central directory's records, exactly as many as the end record counts and nothing after them.
    @_spi(Core)
    public static func centralDirectory(of file: OpenedBundle, end: ZipEndRecord) throws -> [ZipCentralRecord] {
        let path = file.path
        // > The directory lies inside the file (``ZipEndRecord/locate(fileSize:read:)`` checked offset + size, without
        // > overflow, against the end records) and within maxDirectorySize: its size fits an Int.
        guard let directorySize = Int(exactly: end.directorySize) else {
            throw DocumentError.corrupt("the central directory's size is out of range", path: path)
        }
        let directoryBytes = try file.read(end.directoryOffset, directorySize)
        guard directoryBytes.count == directorySize else {
            throw DocumentError(.truncatedArchive, path: path, reason: "the central directory is cut short")
        }
        do {
            let decoded = try ZipCentralDirectory.decode(directoryBytes, count: end.entryCount)
            guard decoded.length == directoryBytes.count else {
                throw DocumentError.corrupt(
                    "the central directory holds \(directoryBytes.count - decoded.length) bytes beyond the \(end.entryCount) records the end record counts",
                    path: path)
            }
            return decoded.records
        } catch let failure as ZipStructureFailure {
            throw structureError(failure, path: path)
        }
    }

    /// 15.2: a bundle has a `mimetype` record. Returns how its place breaks the sniffing promise of section 4 (not
    /// the first entry): a notice, not an error; another zip tool may have repacked the bundle.
    @_spi(Core)
    public static func mimetypeRecordLayout(_ records: [ZipCentralRecord], path: FilePath) throws -> [String] {
        let mimetypeName = Array(BundleLayout.mimetype.utf8)
        guard let mimetypeRecord = records.first(where: { $0.name == mimetypeName }) else {
            throw DocumentError(.notADocument, path: path,
                                reason: "is a zip archive but not a document bundle: it has no 'mimetype' entry")
        }
        return mimetypeRecord.localHeaderOffset != 0 ? ["'mimetype' is not the first entry"] : []
    }

    /// 15.3: every entry on its own, from its central directory record: name, uniqueness, encryption, file type,
    /// compression method, sizes, the total and the ratio within the limits.
    @_spi(Core) public static func checkedEntries(_ records: [ZipCentralRecord], limits: ReadingLimits,
                               path: FilePath) throws -> [BundleEntry] {
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
        return entries
    }

    /// 15.3: a name cannot be both a file and a folder: 'a' and 'a/b' could never both be extracted.
    @_spi(Core) public static func checkNoNameIsFileAndFolder(_ entries: [BundleEntry], path: FilePath) throws {
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
    }

    /// 15.4: where the bytes lie, entries in file order: the archive starts with an entry, every local header agrees
    /// with the directory, no two entries share bytes, no data runs into the directory or past the end. Sorts
    /// `entries` by offset and fills in each one's data offset. Returns how the `mimetype` entry's local header breaks
    /// the sniffing promise (compressed, an extra field, a data descriptor): notices, not errors.
    @_spi(Core) public static func locateData(of entries: inout [BundleEntry], in file: OpenedBundle,
                           end: ZipEndRecord) throws -> [String] {
        let path = file.path
        var layoutProblems: [String] = []
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
            let fixed = try file.read(entry.offset, ZipLocalHeader.fixedSize)
            guard fixed.count == ZipLocalHeader.fixedSize else {
                throw DocumentError(.truncatedArchive, path: path, entry: entry.name,
                                    reason: "the archive ends inside the entry's local header")
            }
            guard let local = ZipLocalHeader(fixed) else {
                throw DocumentError.corrupt("no local header where the directory says the entry starts",
                                            path: path, entry: entry.name)
            }
            let localName = try file.read(entry.offset + UInt64(ZipLocalHeader.fixedSize), local.nameLength)
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
                if !overflow && dataEnd <= file.size && dataEnd > end.directoryOffset {
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
        return layoutProblems
    }

    /// 15.5: the `mimetype` entry holds a media type of 1 to 255 bytes whose CRC-32 matches. Read at byte 38 when
    /// the layout keeps the sniffing promise, else through the entry (inflated if need be).
    @_spi(Core)
    public static func mediaType(_ entries: [BundleEntry], in file: OpenedBundle, sniffable: Bool) throws -> String {
        let path = file.path
        let mimetype = entries.first { $0.role == .mimetype }!
        guard (1...255).contains(mimetype.size) else {
            throw DocumentError(.invalidMimetype, path: path, entry: mimetype.name,
                                reason: "must hold a media type of 1 to 255 bytes")
        }
        let content = sniffable ? try file.read(UInt64(BundleLayout.mediaTypeOffset), Int(mimetype.size))
            : try readEntry(mimetype, from: file.descriptor, path: path)
        var crc = CRC32()
        crc.update(content)
        guard crc.value == mimetype.crc32 else {
            throw DocumentError(.checksumMismatch, path: path, entry: mimetype.name,
                                reason: "the CRC-32 does not match the media type's bytes; the bundle is damaged")
        }
        guard let mediaType = String(validating: content, as: UTF8.self), isMediaType(content) else {
            throw DocumentError(.invalidMimetype, path: path, entry: mimetype.name,
                                reason: "does not hold a media type (ASCII 'type/subtype', no newline)")
        }
        return mediaType
    }

    /// 15.5: the metadata and the store are there.
    @_spi(Core) public static func checkRequiredEntries(_ entries: [BundleEntry], path: FilePath) throws {
        let names = Set(entries.map(\.name))
        for required in [BundleLayout.metadata, BundleLayout.store] where !names.contains(required) {
            throw DocumentError(.missingEntry, path: path, entry: required,
                                reason: "is missing; every bundle has one")
        }
    }

    /// 15.5: the metadata, within its size limit, decoded and checked against the media type and the entries.
    @_spi(Core) public static func metadata(_ entries: [BundleEntry], in file: OpenedBundle, mediaType: String,
                         limits: ReadingLimits) throws -> DocumentMetadata {
        let path = file.path
        let metadataEntry = entries.first { $0.role == .metadata }!
        guard metadataEntry.size <= limits.maxMetadataSize else {
            throw DocumentError(.limitExceeded, path: path, entry: metadataEntry.name,
                                reason: "is \(metadataEntry.size) bytes; the limit is \(limits.maxMetadataSize)")
        }
        let metadataBytes = try readEntry(metadataEntry, from: file.descriptor, path: path)
        // > A few values per entry, and the store's restart offsets and digests: Foundation's decoder holds about
        // > 50 bytes a value, so a count bounds the memory decoding takes whatever the text is.
        let (perEntry, _) = limits.maxEntryCount.multipliedReportingOverflow(by: 8)
        let maxValues = max(0, min(perEntry, Int.max - (1 << 16))) + (1 << 16)
        var metadata = try DocumentMetadata.decode(metadataBytes, bundle: path, maxValues: maxValues)
        try loadStoreIndex(into: &metadata, entries: entries, in: file)
        try check(metadata, mediaType: mediaType, entries: entries, path: path)
        return metadata
    }
}
