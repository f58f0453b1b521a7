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
    @_spi(Core) public var offset: UInt64
    /// Whether it is an explicit folder entry.
    public var isDirectory: Bool
    @_spi(Core) public var role: BundleLayout.Role
    /// Offset of its data (after the local header) in the file, once the local header has been checked.
    @_spi(Core) public var dataOffset: UInt64 = 0

    /// Where the entry's data lies, for the zip layer's readers.
    @_spi(Core) public var location: EntryLocation {
        EntryLocation(name: name, dataOffset: dataOffset, compressedSize: compressedSize, isCompressed: isCompressed,
                      crc32: crc32)
    }
}

/// How a bundle's store is read, given its restart index (`store.deflateRestarts`, FORMAT.md 11.4): the index is a
/// hint, and the content (sizes, CRC-32, SHA-256) is the contract.
///
/// Visible to this package's tools (`docconvert inspect` shows it), not to apps: what an app should know of it is in
/// ``BundleReader/notices``.
@_spi(Core) public enum RestartIndexUse: Sendable, Equatable, CustomStringConvertible {
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
    @_spi(Core) public var description: String {
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
    @_spi(Core) public let restartIndex: RestartIndexUse
    /// Whether the media type can be sniffed at byte 38 (`mimetype` first, stored, bare: FORMAT.md 4). A bundle that
    /// another zip tool repacked may not keep that layout; it is read all the same, and a save restores it
    /// (``notices`` says so in words).
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
    @_spi(Core) public var descriptor: FileDescriptor { file.descriptor }
    /// The bundle file, open: shared with the connections that serve its store (``SegmentLoader``), which keep it
    /// open without keeping the reader and its metadata.
    @_spi(Core) public let file: OpenFile
    /// The bundle file's identity when it was opened, before its first byte was read: a proof that the bundle is
    /// unchanged (``FileIdentity``) compares with this, so a change while the reader checked it is never trusted.
    @_spi(Core) public let openedIdentity: FileIdentity

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
        // The stages of FORMAT.md section 15, in its order; the first failure decides the error.
        try limits.validate(for: path)
        let file = try OpenedBundle.open(path)                                          // 15.1
        var isKept = false
        defer { if !isKept { try? file.descriptor.close() } }  // Squash close error of a read-only descriptor.
        let end = try Self.endRecords(of: file, limits: limits)                          // 15.1, 15.2
        let records = try Self.centralDirectory(of: file, end: end)                      // 15.2
        var layoutProblems = try Self.mimetypeRecordLayout(records, path: path)          // 15.2
        var entries = try Self.checkedEntries(records, limits: limits, path: path)       // 15.3
        try Self.checkNoNameIsFileAndFolder(entries, path: path)                         // 15.3
        layoutProblems += try Self.locateData(of: &entries, in: file, end: end)          // 15.4
        let mediaType = try Self.mediaType(entries, in: file, sniffable: layoutProblems.isEmpty)  // 15.5
        try Self.checkRequiredEntries(entries, path: path)                               // 15.5
        let metadata = try Self.metadata(entries, in: file, mediaType: mediaType, limits: limits)  // 15.5
        let restartIndex = try Self.restartIndexUse(metadata.store.deflateRestarts,      // hints (11.4, 13.1)
                                                    store: entries.first { $0.role == .store }!,
                                                    metadata: metadata, path: path)

        self.path = path
        self.limits = limits
        self.fileSize = file.size
        self.isZIP64 = end.isZIP64
        self.isMediaTypeSniffable = layoutProblems.isEmpty
        self.layoutNotice = layoutProblems.isEmpty ? nil
            : layoutProblems.joined(separator: ", ") + ", so the media type cannot be sniffed at byte 38 (another zip tool repacked the bundle; a save lays it out again)"
        self.mediaType = mediaType
        self.entries = entries
        self.metadata = metadata
        self.restartIndex = restartIndex
        self.file = OpenFile(file.descriptor)
        self.openedIdentity = file.identity
        isKept = true
    }

    /// The entry for a name.
    public func entry(named name: String) -> BundleEntry? {
        entries.first { $0.name == name }
    }

    /// The store entry.
    public var storeEntry: BundleEntry { entries.first { $0.role == .store }! }

    @_spi(Core) public static func isMediaType(_ bytes: [UInt8]) -> Bool {
        guard bytes.allSatisfy({ (0x21...0x7E).contains($0) }) else { return false }
        let parts = bytes.split(separator: 0x2F, omittingEmptySubsequences: false)
        return parts.count == 2 && !parts[0].isEmpty && !parts[1].isEmpty
    }

    /// Reads one small entry at the offset its checked local header gives, bounded by its directory size, its stream
    /// and CRC-32 checked (``EntryReader``).
    @_spi(Core)
    public static func readEntry(_ entry: BundleEntry, from descriptor: FileDescriptor, path: FilePath) throws -> [UInt8] {
        let reader = try EntryReader(descriptor: descriptor, path: path, deflated: entry.isCompressed)
        reader.start(entry.location)
        var bytes: [UInt8] = []
        // > A declared size, not a count of bytes: reserved up to 64 MiB (address space, not memory, until bytes
        // > come: a store index of 64 GiB takes 25 MB, read without one reallocation), grown only as bytes come.
        bytes.reserveCapacity(Int(min(entry.size, 64 << 20)))
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
    @_spi(Core) public static func check(_ metadata: DocumentMetadata, mediaType: String, entries: [BundleEntry],
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
        // > The keys a version requires were checked when the metadata was decoded.
        if metadata.formatVersion < 2, let sha256 = metadata.store.sha256, !isSHA256(sha256) {
            throw mismatch("'store.sha256' is not a SHA-256")
        }
        // > Version 3's segments come from its store index, checked by ``loadStoreIndex(into:entries:in:)`` with the
        // > store digest they make, and kept as bytes: they have no spelling to check.
        if let segments = metadata.store.segments, metadata.store.index == nil {
            // > Numbers from the bundle: checked before any arithmetic, and the arithmetic checked too (an interval
            // > of 2⁶³ − 1 must be refused, not overflow into a trap).
            guard segments.interval >= 65_536,
                  let expected = DocumentMetadata.SegmentDigests.count(forSize: metadata.store.size,
                                                                       interval: segments.interval) else {
                throw mismatch("'store.segments.interval' is \(segments.interval); it is at least 65536")
            }
            let characters = Int64(segments.sha256.utf8.count)
            let (wanted, overflow) = expected.multipliedReportingOverflow(by: 64)
            guard !overflow, characters == wanted else {
                throw mismatch("'store.segments.sha256' holds \(characters) characters where \(expected) segments of \(segments.interval) bytes make the store (64 each)")
            }
            if let bad = segments.sha256.utf8.firstIndex(where: { !((0x30...0x39).contains($0) || (0x61...0x66).contains($0)) }) {
                let position = segments.sha256.utf8.distance(from: segments.sha256.utf8.startIndex, to: bad)
                throw mismatch("'store.segments.sha256' is not lowercase hexadecimal at character \(position) (segment \(position / 64))")
            }
            if metadata.formatVersion >= 2 {
                // > Computed from the metadata alone: a digest that does not name these segments is a lie found
                // > before any byte of the store is read.
                guard let digest = metadata.store.digest, isSHA256(digest) else {
                    throw mismatch("'store.digest' is not a SHA-256")
                }
                guard segments.storeDigest(size: metadata.store.size) == digest else {
                    throw mismatch("'store.digest' is not the digest of 'store.size' and 'store.segments'")
                }
            }
        }
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
                                        metadata: DocumentMetadata, path: FilePath) throws -> RestartIndexUse {
        guard let restarts else { return .absent }
        let names = RecordNames(formatVersion: metadata.formatVersion)
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
                                reason: "\(names.restarts) names this entry's stream but does not describe it: \(problem); the metadata does not describe this bundle")
        }
        // > Version 3's CRC-32s and CRC-32Cs came from its store index, one per segment (checked there).
        let fromIndex = metadata.store.index != nil
        if metadata.formatVersion >= 2, !fromIndex, let problem = restarts.crc32sProblem {
            // > Version 2 (FORMAT.md 13.1): an index in use carries one CRC-32 per restart segment.
            throw DocumentError(.metadataMismatch, path: path, entry: BundleLayout.store,
                                reason: "\(names.restarts) describes this entry's stream but \(problem); the metadata does not describe this bundle")
        }
        if metadata.formatVersion >= 2, !fromIndex, let problem = restarts.compressedCRC32CsProblem {
            throw DocumentError(.metadataMismatch, path: path, entry: BundleLayout.store,
                                reason: "\(names.restarts) describes this entry's stream but \(problem); the metadata does not describe this bundle")
        }
        if metadata.formatVersion >= 2, let combined = combinedCRC(of: restarts, size: store.size),
           combined != store.crc32 {
            // > A reader checks each restart segment it inflates against its CRC-32; combined, they must be the
            // > entry's, so that what a segment-wise reader serves is what every zip tool reads (FORMAT.md 11.4).
            throw DocumentError(.metadataMismatch, path: path, entry: BundleLayout.store,
                                reason: "the CRC-32s of the restart segments in \(names.crc32s) combine to \(hex32(combined)), but the zip entry's CRC-32 is \(hex32(store.crc32)); the metadata does not describe this bundle")
        }
        return .used(segments: restarts.offsets.count, identified: isIdentified)
    }

    /// The CRC-32 of the whole entry, combined from the CRC-32 of each restart segment that `restarts.crc32s`
    /// records; `nil` when it records none. The index has passed ``ParallelInflater/check(_:size:compressedSize:)``
    /// (one segment of `interval` bytes a segment, the last shorter), and `crc32s` its spelling check.
    @_spi(Core) public static func combinedCRC(of restarts: DocumentMetadata.DeflateRestarts, size: UInt64) -> UInt32? {
        guard restarts.recordsCRC32s, restarts.interval > 0, let size = Int64(exactly: size) else { return nil }
        var combined: UInt32 = 0
        // > Every segment but the last has the interval's length: one operator for them all (zlib's
        // > crc32_combine_gen), a few multiplications a segment instead of a whole crc32_combine.
        let whole = CRC32.Combiner(lengthB: Int(clamping: min(restarts.interval, size)))
        for index in restarts.offsets.indices {
            guard let crc = restarts.recordedCRC(ofSegment: index) else { return nil }
            // > index < ⌈size ÷ interval⌉ (checked): index × interval < size, no overflow.
            let start = Int64(index) * restarts.interval
            let length = Int(min(restarts.interval, size - start))
            if index == 0 {
                combined = crc
            } else {
                combined = Int64(length) == restarts.interval ? whole.combine(combined, crc)
                    : CRC32.combine(combined, crc, lengthB: length)
            }
        }
        return combined
    }

    private static func hex32(_ value: UInt32) -> String {
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: 8 - digits.count) + digits
    }

    @_spi(Core) public static func isSHA256(_ text: String) -> Bool {
        text.utf8.count == 64 && text.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }

    @_spi(Core) public static func structureError(_ failure: ZipStructureFailure, path: FilePath) -> DocumentError {
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
