#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Crypto
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SystemPackage

/// The content of `DocumentMetadata.json`: what a bundle is, what it holds, and where it came from.
///
/// Readers ignore keys they do not know; a reader refuses a ``formatVersion`` newer than
/// ``BundleLayout/formatVersion``. `docs/FORMAT.md` documents every key.
///
/// ```swift
/// let reader = try BundleReader(at: "Notes.mdz")
/// print(reader.metadata.store.contentDigest, reader.metadata.model.compatibilityLevel)
/// ```
public struct DocumentMetadata: Codable, Sendable, Equatable {
    /// Always `"managed-document"`.
    public var format: String
    /// The format version the bundle follows: 2 as this package writes it, 1 for bundles written before version 2
    /// (FORMAT.md 13; read by their own rules).
    public var formatVersion: Int
    /// A UUID that identifies the document across saves and copies.
    public var documentID: UUID
    /// When the document was first created.
    public var createdAt: Date
    /// When the bundle was last written.
    public var modifiedAt: Date
    /// The program that wrote the bundle.
    public var generator: Generator
    /// The media type, equal to the `mimetype` entry's content.
    public var mediaType: String
    /// The SQLite store.
    public var store: Store
    /// The app's data model and the migrations applied to this document.
    public var model: Model
    /// Every entry other than `mimetype`, `DocumentMetadata.json` and the store, sorted by name.
    public var entries: [Entry]
    /// Where the document came from when it was converted from a legacy store.
    public var provenance: Provenance?
    /// Free-form app metadata.
    public var userInfo: [String: JSONValue]

    /// The program that wrote a bundle.
    public struct Generator: Codable, Sendable, Equatable {
        /// The writing program's name.
        public var name: String
        /// The writing program's version.
        public var version: String
        /// A generator record.
        public init(name: String, version: String) {
            self.name = name
            self.version = version
        }
    }

    /// Facts about the store entry, checked by readers.
    public struct Store: Codable, Sendable, Equatable {
        /// The facts of a store entry of `size` bytes; its digests and restart index are set once the entry is
        /// written (``sha256``, ``digest``, ``deflateRestarts``, ``segments``).
        @_spi(Core)
        public init(entry: String, size: Int64, pageSize: Int, userVersion: Int32, applicationID: Int32? = nil,
                    schemaFingerprint: String) {
            self.entry = entry
            self.size = size
            self.pageSize = pageSize
            self.userVersion = userVersion
            self.applicationID = applicationID
            self.schemaFingerprint = schemaFingerprint
        }

        /// The entry name, `StoreContent/persistentStore`.
        public var entry: String
        /// Size in bytes.
        public var size: Int64
        /// Lowercase hex SHA-256 of the store's bytes: format version 1 only (`nil` in a version 2 bundle).
        public var sha256: String?
        /// The store digest of format version 2 (FORMAT.md 13.1): the SHA-256 of the store's size, its segment
        /// interval and its segment digests (``SegmentDigests/storeDigest(size:)``), lowercase hex; `nil` in a
        /// version 1 bundle.
        public var digest: String? = nil
        /// `PRAGMA page_size`.
        public var pageSize: Int
        /// `PRAGMA user_version`.
        public var userVersion: Int32
        /// `PRAGMA application_id`.
        public var applicationID: Int32?
        /// Lowercase hex SHA-256 of the schema (see ``StoreFacts/schemaFingerprint``).
        public var schemaFingerprint: String
        /// Where the deflated store entry's stream starts afresh, when the writer made it so (optional).
        public var deflateRestarts: DeflateRestarts? = nil
        /// The SHA-256 of the store's bytes segment by segment, so that any part can be checked on its own
        /// (FORMAT.md 11.4; required from format version 2 on).
        public var segments: SegmentDigests? = nil
        /// Where the store's segment records lie in format version 3 (FORMAT.md 13.2): the store index entry and
        /// its root. A reader fills ``segments`` and ``deflateRestarts`` from that entry once it is checked; the
        /// metadata text of a version 3 bundle holds neither.
        public var index: StoreIndexReference? = nil

        /// The digest that names the store's content in the bundle's format version: ``digest`` (version 2) or
        /// ``sha256`` (version 1). Two bundles with the same content digest hold the same store bytes.
        public var contentDigest: String { digest ?? sha256 ?? "" }
    }

    /// The SHA-256 of a store's uncompressed bytes, `interval` bytes at a time (the last segment holds the rest).
    ///
    /// They describe the content, not how it is compressed: they stay true when another zip tool repacks the bundle.
    /// For a deflated store written with ``DeflateRestarts``, each segment is a whole number of restart segments.
    public struct SegmentDigests: Codable, Sendable, Equatable {
        /// Bytes per segment, at least 65,536.
        public var interval: Int64
        /// The lowercase hex SHA-256 of each segment, in order, concatenated: 64 characters a segment,
        /// ⌈size ÷ interval⌉ segments. One string, not an array: a large store has thousands of segments, and the
        /// metadata is read at every open.
        ///
        /// Digests a reader took from a version 3 store index are kept as their 32 raw bytes each and spelled here
        /// on each use (8 MB for a 16 GiB store): readers of segments take their bytes (`rawDigests`) instead.
        public var sha256: String {
            get { spelling ?? (raw ?? []).hexString }
            set { (spelling, raw) = (newValue, nil) }
        }
        /// The metadata's spelling (versions 1 and 2, and every writer's), or `nil` when `raw` holds the digests.
        private var spelling: String?
        /// 32 bytes a segment, as a version 3 store index holds them, or `nil` when `spelling` holds the digests.
        private var raw: [UInt8]?

        /// Digests from their concatenation, as the metadata holds them.
        public init(interval: Int64, sha256: String) {
            self.interval = interval
            self.spelling = sha256
        }

        /// Digests from one lowercase hex SHA-256 per segment, in order.
        public init(interval: Int64, digests: [String]) {
            self.init(interval: interval, sha256: digests.joined())
        }

        /// Digests of 32 raw bytes each, concatenated, as a version 3 store index holds them (a whole number of them).
        @_spi(Core) public init(interval: Int64, rawDigests: [UInt8]) {
            precondition(rawDigests.count % 32 == 0, "whole digests")
            self.interval = interval
            self.raw = rawDigests
        }

        private enum CodingKeys: String, CodingKey { case interval, sha256 }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            self.init(interval: try container.decode(Int64.self, forKey: .interval),
                      sha256: try container.decode(String.self, forKey: .sha256))
        }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(interval, forKey: .interval)
            try container.encode(sha256, forKey: .sha256)
        }

        /// Equal digests, however each side keeps them.
        public static func == (a: SegmentDigests, b: SegmentDigests) -> Bool {
            guard a.interval == b.interval else { return false }
            if let left = a.raw, let right = b.raw { return left == right }
            return a.sha256 == b.sha256
        }

        /// How many digests there are (a partial one counts as one).
        public var count: Int { raw.map { $0.count / 32 } ?? ((spelling ?? "").utf8.count + 63) / 64 }

        /// The digests' 32 raw bytes each, concatenated; `nil` when ``sha256`` is not lowercase hexadecimal in whole
        /// digests (a version 2 reader checks it when the bundle opens). Kept, not parsed, when a store index gave them.
        @_spi(Core) public var rawDigests: [UInt8]? {
            if let raw { return raw }
            let text = Array((spelling ?? "").utf8)
            guard text.count % 64 == 0 else { return nil }
            var bytes = [UInt8](repeating: 0, count: text.count / 2)
            for index in bytes.indices {
                guard let high = Hex.nibble(text[2 * index]), let low = Hex.nibble(text[2 * index + 1]) else { return nil }
                bytes[index] = high << 4 | low
            }
            return bytes
        }

        /// The store digest of format version 2 (FORMAT.md 13.1) for a store of `size` bytes cut by these segments:
        /// the SHA-256 of `MDZ-store-digest-2`, `size` and ``interval`` as 8 bytes little-endian each, then each
        /// segment's 32-byte SHA-256 in order. `nil` when ``sha256`` is not lowercase hexadecimal in whole digests.
        public func storeDigest(size: Int64) -> String? {
            guard let bytes = rawDigests else { return nil }
            return StoreIndex.storeDigest(size: size, interval: interval, digests: bytes)
        }

        /// Each segment's digest, in order: a new array split from ``sha256`` at every call (take it once, outside
        /// a loop over the segments).
        public var digests: [String] {
            let bytes = Array(sha256.utf8)
            return stride(from: 0, to: bytes.count, by: 64).map {
                String(decoding: bytes[$0..<min(bytes.count, $0 + 64)], as: UTF8.self)
            }
        }

        /// The byte range segment `index` covers in a store of `size` bytes (empty, at `size`, for a segment past
        /// the store's end).
        public func range(ofSegment index: Int, size: Int64) -> Range<Int64> {
            // > Numbers from a bundle: a product or sum past 2⁶³ − 1 lies past any store's end.
            let end = max(0, size)
            let (start, overflow) = Int64(index).multipliedReportingOverflow(by: max(1, interval))
            guard !overflow, index >= 0, start < end else { return end..<end }
            let (stop, past) = start.addingReportingOverflow(max(1, interval))
            return start..<(past ? end : min(end, stop))
        }

        /// How many segments of `interval` bytes make `size` bytes, ⌈size ÷ interval⌉, without the overflow of
        /// `(size + interval - 1) / interval` (both come from a bundle); `nil` for a negative size or an interval
        /// below 1.
        @_spi(Core) public static func count(forSize size: Int64, interval: Int64) -> Int64? {
            guard size >= 0, interval > 0 else { return nil }
            return size / interval + (size % interval == 0 ? 0 : 1)
        }
    }

    /// The metadata's reference to the store index of format version 3 (FORMAT.md 13.2): the entry, the root of
    /// its hash tree, the store's segment interval, and the stream its restart points describe.
    public struct StoreIndexReference: Codable, Sendable, Equatable {
        /// The entry name, `StoreContent/persistentStore.index`.
        public var entry: String
        /// The lowercase hex SHA-256 of the index's header and the top hash of its tree: what every record is
        /// checked against.
        public var root: String
        /// Bytes per segment (also between restart points, when the store has them), at least 65,536.
        public var interval: Int64
        /// The compressed size of the stream the records' restart points describe; `nil` when they carry none (a
        /// stored store, or one deflated whole). With ``crc32``, what a reader compares with the store entry to
        /// tell a repacked stream, whose restart points it then ignores.
        public var compressedSize: Int64?
        /// The CRC-32 of the entry the restart points describe (see ``compressedSize``).
        public var crc32: UInt32?

        /// A reference with these values.
        public init(entry: String, root: String, interval: Int64, compressedSize: Int64? = nil, crc32: UInt32? = nil) {
            self.entry = entry
            self.root = root
            self.interval = interval
            self.compressedSize = compressedSize
            self.crc32 = crc32
        }
    }

    /// The store's restart index (FORMAT.md 11.4); the type lives with the zip layer that writes and reads it.
    public typealias DeflateRestarts = MDZCore.DeflateRestarts

    /// The app's model as recorded in the document.
    public struct Model: Codable, Sendable, Equatable {
        /// The model's name (the app's), or `nil` for a document that has none.
        public var name: String?
        /// The model's version, compared as dotted numbers.
        public var version: String?
        /// The compatibility level the document's store has reached (fix-up migrations raise it).
        public var compatibilityLevel: Int
        /// The migrations applied to the store, oldest first.
        public var migrations: [AppliedMigration]

        /// A model record with these values.
        public init(name: String? = nil, version: String? = nil, compatibilityLevel: Int = 0,
                    migrations: [AppliedMigration] = []) {
            self.name = name
            self.version = version
            self.compatibilityLevel = compatibilityLevel
            self.migrations = migrations
        }
    }

    /// A migration that ran on this document.
    public struct AppliedMigration: Codable, Sendable, Equatable {
        /// The migration's identifier, unique within the document.
        public var identifier: String
        /// The SHA-256 of the migration's SQL, for migrations read from files.
        public var checksum: String?
        /// When it was applied.
        public var appliedAt: Date
        /// A record of one applied migration.
        public init(identifier: String, checksum: String?, appliedAt: Date) {
            self.identifier = identifier
            self.checksum = checksum
            self.appliedAt = appliedAt
        }
    }

    /// A content entry other than the store.
    public struct Entry: Codable, Sendable, Equatable {
        /// Memberwise.
        @_spi(Core) public init(name: String, size: Int64, sha256: String) {
            self.name = name
            self.size = size
            self.sha256 = sha256
        }

        /// The entry's name in the zip.
        public var name: String
        /// Its uncompressed size in bytes.
        public var size: Int64
        /// The SHA-256 of its uncompressed bytes, lowercase hex.
        public var sha256: String
    }

    /// Where a converted document came from.
    public struct Provenance: Codable, Sendable, Equatable {
        /// Memberwise.
        @_spi(Core)
        public init(kind: String, fileName: String, size: Int64, files: [Entry], convertedAt: Date, coreData: CoreDataInfo? = nil, packageMetadata: [String: JSONValue]? = nil, warnings: [String]? = nil) {
            self.kind = kind
            self.fileName = fileName
            self.size = size
            self.files = files
            self.convertedAt = convertedAt
            self.coreData = coreData
            self.packageMetadata = packageMetadata
            self.warnings = warnings
        }

        /// `coredata-sqlite`, `sqlite` or `uimanageddocument-package`.
        public var kind: String
        /// The source's file or package name.
        public var fileName: String
        /// The source's total size in bytes (store, sidecars and external data).
        public var size: Int64
        /// Every source file, relative to the source's folder, with its size and SHA-256.
        public var files: [Entry]
        /// When it was converted.
        public var convertedAt: Date
        /// What the store's `Z_METADATA` said, for Core Data stores.
        public var coreData: CoreDataInfo?
        /// The package's `DocumentMetadata.plist`, as JSON, for UIManagedDocument packages that have one.
        public var packageMetadata: [String: JSONValue]?
        /// Things a reader of the source would want to know: dangling external-data references, and the like.
        public var warnings: [String]?
    }

    /// What a Core Data store's `Z_METADATA` says.
    public struct CoreDataInfo: Codable, Sendable, Equatable {
        /// Memberwise.
        @_spi(Core)
        public init(storeUUID: String? = nil, storeType: String? = nil, modelVersionIdentifiers: [String], modelVersionHashes: [String: String], frameworkVersion: String? = nil, metadataVersion: Int? = nil, otherKeys: [String]? = nil) {
            self.storeUUID = storeUUID
            self.storeType = storeType
            self.modelVersionIdentifiers = modelVersionIdentifiers
            self.modelVersionHashes = modelVersionHashes
            self.frameworkVersion = frameworkVersion
            self.metadataVersion = metadataVersion
            self.otherKeys = otherKeys
        }

        /// `NSStoreUUID` from the store's `Z_METADATA`.
        public var storeUUID: String?
        /// `NSStoreType` (`SQLite`).
        public var storeType: String?
        /// `NSStoreModelVersionIdentifiers`.
        public var modelVersionIdentifiers: [String]
        /// Entity name to base64 version hash.
        public var modelVersionHashes: [String: String]
        /// `NSPersistenceFrameworkVersion`.
        public var frameworkVersion: String?
        /// `Z_METADATA.Z_VERSION`.
        public var metadataVersion: Int?
        /// Names of the other keys in `Z_PLIST` (app metadata, kept in the store; values are not copied here).
        public var otherKeys: [String]?
    }

    /// A new document's metadata; ``store`` is filled in when the bundle is written.
    public init(documentID: UUID = UUID(), createdAt: Date = Date(), mediaType: String = BundleLayout.defaultMediaType,
                model: Model = Model(), userInfo: [String: JSONValue] = [:]) {
        self.format = BundleLayout.formatName
        self.formatVersion = BundleLayout.formatVersion
        self.documentID = documentID
        self.createdAt = createdAt
        self.modifiedAt = createdAt
        self.generator = Generator(name: "ManagedDocument", version: ManagedDocumentVersion.string)
        self.mediaType = mediaType
        self.store = Store(entry: BundleLayout.store, size: 0, pageSize: 0, userVersion: 0, schemaFingerprint: "")
        self.model = model
        self.entries = []
        self.provenance = nil
        self.userInfo = userInfo
    }
}

#if !os(Linux)
#error("ManagedDocument is built and tested on Linux only (see the README's Platform line): its file handling is written against Glibc and Linux")
#endif

extension DocumentMetadata {
    @_spi(Core) public static let maximumEncodedSize = 16 << 20

    @_spi(Core) public func encoded() throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(ISO8601.format(date))
        }
        return Array(try encoder.encode(self))
    }

    /// Decodes metadata, checking the format name and version before the rest of the shape.
    ///
    /// - Parameter maxValues: the most JSON values (numbers, strings, arrays, objects, literals) the text may hold,
    ///   counted before it is parsed: Foundation's decoder holds about 50 bytes for each, so 16 MiB of `[1,1,1,…]`
    ///   would take hundreds of MiB. A bundle's metadata has a few values per entry (``ReadingLimits/maxEntryCount``).
    @_spi(Core)
    public static func decode(_ bytes: [UInt8], bundle: FilePath?, maxValues: Int = 1 << 20) throws -> DocumentMetadata {
        struct Header: Decodable { var format: String?; var formatVersion: Int? }
        if let problem = JSONShape.problem(bytes, maxValues: maxValues, maxDepth: 64) {
            throw DocumentError(.limitExceeded, path: bundle, entry: BundleLayout.metadata, reason: problem)
        }
        let data = Data(bytes)
        let header: Header
        do { header = try JSONDecoder().decode(Header.self, from: data) } catch let error as DecodingError {
            // > A key of the wrong kind is named with what it must be; a text that is not an object at all is not.
            let problem = DocumentError.fieldProblem(error)
            throw DocumentError(.invalidMetadata, path: bundle, entry: BundleLayout.metadata,
                                reason: problem.key.map { "\($0) \(problem.what)" } ?? "is not a JSON object (\(problem.what))")
        } catch {
            throw DocumentError(.invalidMetadata, path: bundle, entry: BundleLayout.metadata,
                                reason: "is not a JSON object (\(error))")
        }
        guard header.format == BundleLayout.formatName else {
            throw DocumentError(.invalidMetadata, path: bundle, entry: BundleLayout.metadata,
                                reason: "'format' is \(header.format.map { "'\($0)'" } ?? "missing"), not '\(BundleLayout.formatName)'")
        }
        guard let version = header.formatVersion, version >= 1 else {
            throw DocumentError(.invalidMetadata, path: bundle, entry: BundleLayout.metadata,
                                reason: "'formatVersion' is missing or not a positive integer")
        }
        guard version <= BundleLayout.newestFormatVersion else {
            throw DocumentError(.newerFormat, path: bundle, entry: BundleLayout.metadata,
                                reason: "was written in format version \(version); this program reads up to version \(BundleLayout.newestFormatVersion): update it to open this bundle")
        }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            let text = try container.decode(String.self)
            guard let date = ISO8601.parse(text) else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "must be an ISO 8601 date such as \"2026-11-23T14:02:05.123Z\", found \"\(text)\"")
            }
            return date
        }
        let metadata: DocumentMetadata
        do {
            metadata = try decoder.decode(DocumentMetadata.self, from: data)
        } catch {
            throw DocumentError(.invalidMetadata, path: bundle, entry: BundleLayout.metadata,
                                reason: describe(error))
        }
        if let problem = metadata.informativeNumberOutOfRange {
            throw DocumentError(.invalidMetadata, path: bundle, entry: BundleLayout.metadata,
                                reason: "does not have the documented shape: \(problem)")
        }
        if let missing = metadata.missingStoreKey(ofVersion: version) {
            throw DocumentError(.invalidMetadata, path: bundle, entry: BundleLayout.metadata,
                                reason: "does not have the documented shape: missing key '\(missing)' (format version \(version) requires it)")
        }
        return metadata.keepingKeys(ofVersion: version)
    }

    /// The store key that format `version` requires and the metadata lacks (FORMAT.md 11.4, 13.1), if any.
    private func missingStoreKey(ofVersion version: Int) -> String? {
        if version < 2 { return store.sha256 == nil ? "store.sha256" : nil }
        if store.digest == nil { return "store.digest" }
        if version >= 3 { return store.index == nil ? "store.index" : nil }
        return store.segments == nil ? "store.segments" : nil
    }

    /// The metadata with only the store keys its format version defines (FORMAT.md 13): a version 1 bundle is read by
    /// its `store.sha256` even when it carries a `digest` or CRC-32s some other program added (keys version 1 does
    /// not know), and a version 2 bundle by its `store.digest` alone.
    private func keepingKeys(ofVersion version: Int) -> DocumentMetadata {
        var metadata = self
        if version < 2 {
            metadata.store.digest = nil
            metadata.store.deflateRestarts?.crc32s = nil
            metadata.store.deflateRestarts?.compressedCRC32Cs = nil
        } else {
            metadata.store.sha256 = nil
        }
        if version < 3 {
            metadata.store.index = nil
        } else {
            // > Version 3 (FORMAT.md 13.2): the segments and restart points are the store index's, filled in once it
            // > is checked; any the text carries are not read.
            metadata.store.segments = nil
            metadata.store.deflateRestarts = nil
        }
        return metadata
    }

    /// The first number that no reader checks against the bundle, yet is out of its documented range (FORMAT.md
    /// 11.1: sizes in 0 … 2⁶³ − 1), so that code that shows it (`docconvert inspect`) may count on it. The numbers
    /// the reader checks against the bundle (`store.size`, `store.segments`, `entries`) are checked there
    /// (``BundleReader``, `metadataMismatch`); the restart index is a hint, checked when it is used.
    @_spi(Core) public var informativeNumberOutOfRange: String? {
        guard let provenance else { return nil }
        if provenance.size < 0 { return "'provenance.size' is \(provenance.size); a size is at least 0" }
        if let file = provenance.files.first(where: { $0.size < 0 }) {
            return "'provenance.files' gives '\(file.name)' a size of \(file.size); a size is at least 0"
        }
        return nil
    }

    /// A decoding failure of the metadata as "<key> <what is wrong>" (`model.name must be a string, found a number`),
    /// FORMAT.md's key names, never Swift's type names.
    private static func describe(_ error: any Error) -> String {
        guard let error = error as? DecodingError else { return "does not have the documented shape (\(error))" }
        let problem = DocumentError.fieldProblem(error)
        return problem.key.map { "\($0) \(problem.what)" } ?? "does not have the documented shape: \(problem.what)"
    }}

/// ISO 8601 dates as the metadata writes them: UTC, milliseconds, `2026-11-23T14:02:05.123Z`.
///
/// Written and read with the C library's UTC calendar (`gmtime_r`, `timegm`): Foundation's date styles look up the
/// machine's current time zone through ICU when they are made, which loads ICU's data into the process (several MiB
/// of memory for every conversion and save). Input in any other ISO 8601 form (an offset instead of `Z`, no
/// seconds) goes to Foundation's parser, so documents from other writers still read.
@_spi(Core) public enum ISO8601: Sendable {
    @_spi(Core) public static func format(_ date: Date) -> String {
        // Whole milliseconds, rounded to the nearest: a date read from `…05.123Z` is 0.123 s stored in binary, a hair
        // above or below, and must be written back as `.123`.
        let totalMilliseconds = (date.timeIntervalSince1970 * 1000).rounded()
        guard totalMilliseconds.isFinite, abs(totalMilliseconds) < 1e17 else { return Date.ISO8601FormatStyle().format(date) }
        let total = Int64(totalMilliseconds)
        let (quotient, remainder) = total.quotientAndRemainder(dividingBy: 1000)
        let seconds = remainder < 0 ? quotient - 1 : quotient  // floor division, for dates before 1970
        let milliseconds = Int(remainder < 0 ? remainder + 1000 : remainder)
        var time = time_t(seconds)
        var parts = tm()
        guard gmtime_r(&time, &parts) != nil else { return Date.ISO8601FormatStyle().format(date) }
        func digits(_ value: Int, _ count: Int) -> String {
            let text = String(value)
            return String(repeating: "0", count: max(0, count - text.count)) + text
        }
        return digits(Int(parts.tm_year) + 1900, 4) + "-" + digits(Int(parts.tm_mon) + 1, 2) + "-"
            + digits(Int(parts.tm_mday), 2) + "T" + digits(Int(parts.tm_hour), 2) + ":" + digits(Int(parts.tm_min), 2)
            + ":" + digits(Int(parts.tm_sec), 2) + "." + digits(milliseconds, 3) + "Z"
    }

    /// The date, or `nil` when `text` is not an ISO 8601 date-time (or names a day or time that does not exist).
    @_spi(Core) public static func parse(_ text: String) -> Date? {
        let bytes = Array(text.utf8)
        let isUTCForm = bytes.count >= 20 && bytes.last == UInt8(ascii: "Z") && bytes[4] == UInt8(ascii: "-")
            && bytes[7] == UInt8(ascii: "-") && bytes[10] == UInt8(ascii: "T") && bytes[13] == UInt8(ascii: ":")
            && bytes[16] == UInt8(ascii: ":")
        if isUTCForm { return parseUTC(bytes) }
        // > Other ISO 8601 forms (offsets, no fraction) go to Foundation, which forgives trailing bytes: only the
        // > characters a date-time can hold, and a 'Z' only at the end.
        let allowed = Set("0123456789-:T.+Z".utf8)
        guard bytes.allSatisfy(allowed.contains), !bytes.dropLast().contains(UInt8(ascii: "Z")) else { return nil }
        let parsed = (try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(text))
            ?? (try? Date.ISO8601FormatStyle().parse(text))
        return parsed.flatMap { canonical($0.timeIntervalSince1970) }
    }

    /// The date at whole milliseconds, as whole seconds plus the milliseconds' fraction: the one value every form of
    /// the same millisecond reads as, so that a date read, written (``format(_:)``) and read again is unchanged.
    private static func canonical(_ seconds: Double) -> Date? {
        let milliseconds = (seconds * 1000).rounded()
        guard milliseconds.isFinite, abs(milliseconds) < 1e17 else { return nil }
        let whole = (milliseconds / 1000).rounded(.down)
        return Date(timeIntervalSince1970: whole + (milliseconds - whole * 1000) / 1000)
    }

    /// `YYYY-MM-DDTHH:MM:SS[.fraction]Z`, the form this package writes (separators already checked).
    private static func parseUTC(_ bytes: [UInt8]) -> Date? {
        func number(_ range: Range<Int>) -> Int? {
            var value = 0
            for index in range {
                let byte = bytes[index]
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
                value = value * 10 + Int(byte - UInt8(ascii: "0"))
            }
            return value
        }
        guard let year = number(0..<4), let month = number(5..<7), let day = number(8..<10),
              let hour = number(11..<13), let minute = number(14..<16), let second = number(17..<19),
              (1...12).contains(month), hour < 24, minute < 60, second < 60 else { return nil }
        let isLeap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
        let monthDays = [31, isLeap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        guard (1...monthDays[month - 1]).contains(day) else { return nil }
        var fraction = 0.0
        let end = bytes.count - 1
        if end > 19 {
            guard bytes[19] == UInt8(ascii: "."), end > 20, end - 20 <= 9, let value = number(20..<end) else { return nil }
            fraction = Double(value) / pow(10, Double(end - 20))
        }
        var parts = tm()
        parts.tm_year = Int32(year - 1900)
        parts.tm_mon = Int32(month - 1)
        parts.tm_mday = Int32(day)
        parts.tm_hour = Int32(hour)
        parts.tm_min = Int32(minute)
        parts.tm_sec = Int32(second)
        let seconds = timegm(&parts)
        return canonical(Double(seconds) + fraction)
    }
}

/// A JSON value, for free-form metadata (`userInfo`, a package's `DocumentMetadata.plist`).
public enum JSONValue: Codable, Sendable, Equatable {
    /// JSON `null`.
    case null
    /// `true` or `false`.
    case bool(Bool)
    /// A number.
    case number(Double)
    /// A string.
    case string(String)
    /// An array.
    case array([JSONValue])
    /// An object.
    case object([String: JSONValue])

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() { self = .null }
        else if let value = try? container.decode(Bool.self) { self = .bool(value) }  // try each JSON type in turn
        else if let value = try? container.decode(Double.self) { self = .number(value) }
        else if let value = try? container.decode(String.self) { self = .string(value) }
        else if let value = try? container.decode([JSONValue].self) { self = .array(value) }
        else { self = .object(try container.decode([String: JSONValue].self)) }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .number(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }
}

/// A count of JSON text's values and nesting, made in one pass without parsing it, so that a decoder is never
/// handed text whose tree would not fit the memory a reader allows.
@_spi(Core) public enum JSONShape: Sendable {
    /// Why `bytes` holds more than `maxValues` values or nests deeper than `maxDepth`; `nil` when it does not (or is
    /// not JSON: the decoder says so then).
    @_spi(Core) public static func problem(_ bytes: [UInt8], maxValues: Int, maxDepth: Int) -> String? {
        var values = 1
        var depth = 0
        var inString = false
        var escaped = false
        for byte in bytes {
            if inString {
                if escaped { escaped = false } else if byte == 0x5C { escaped = true } else if byte == 0x22 { inString = false }
                continue
            }
            switch byte {
            case 0x22: inString = true
            case 0x5B, 0x7B:  // [ {
                depth += 1
                values += 1
                if depth > maxDepth { return "nests deeper than \(maxDepth) levels; no bundle's metadata does" }
            case 0x5D, 0x7D: depth -= 1  // ] }
            case 0x2C, 0x3A: values += 1  // , :
            default: continue
            }
            if values > maxValues {
                return "holds more than \(maxValues) JSON values (ReadingLimits.maxEntryCount allows a few per entry)"
            }
        }
        return nil
    }
}
