#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SystemPackage

/// The one error type thrown by the public API of ManagedDocument.
///
/// Every error names what failed (``code``), the file it concerns (``path``), the archive entry when there is one
/// (``entry``), and the lower-level cause (``underlyingError``: a GRDB `DatabaseError`, an `Errno`, a libarchive
/// failure). Its ``description`` is one line a person can act on:
///
/// ```
/// /data/Notes.mdz: StoreContent/persistentStore: SHA-256 does not match the metadata; the bundle is damaged, restore it from a backup
/// ```
///
/// Switch on ``code`` to react to a specific failure:
///
/// ```swift
/// do {
///     let bundle = try BundleReader(at: path)
/// } catch let error as DocumentError where error.code == .newerFormat {
///     print("Please update the app to open \(error.path?.string ?? "this document")")
/// }
/// ```
public struct DocumentError: Error, Sendable, CustomStringConvertible, LocalizedError {
    /// What went wrong. A struct rather than an enum, so that a new code never breaks a client's `switch`.
    public struct Code: Hashable, Sendable, CustomStringConvertible, CaseIterable {
        @_spi(Core) public enum Storage: String, Hashable, Sendable, CaseIterable {
            case notFound, alreadyExists, notADocument, notAZipArchive, corruptArchive, truncatedArchive
            case pathTraversal, invalidEntryName, duplicateEntry, nonRegularEntry, encryptedEntry
            case unsupportedCompression, entryNotAllowed, missingEntry, overlappingEntries, limitExceeded
            case checksumMismatch, sizeMismatch, mimetypeNotFirst, invalidMimetype, mediaTypeMismatch
            case invalidMetadata, metadataMismatch, newerFormat, notSQLite, storeCorrupt, storeInWALMode
            case ioFailure, cannotCreate, inUse, notALegacyStore, storeBusy, verificationFailed
            case newerModel, migrationFailed, legacyConversionFailed, invalidMigrations, migrationChanged
            case closed, readOnly, modelMismatch, documentTypeMismatch, invalidArgument
        }
        @_spi(Core) public let storage: Storage
        @_spi(Core) public init(_ storage: Storage) { self.storage = storage }

        public var description: String { storage.rawValue }

        /// Every code this version of the library can throw, in declaration order (a tool maps each to an exit
        /// status, a test checks that none is left out).
        public static var allCases: [Code] { Storage.allCases.map(Code.init) }

        /// The file or folder does not exist.
        public static var notFound: Self { Self(.notFound) }
        /// The destination exists and the operation does not replace it.
        public static var alreadyExists: Self { Self(.alreadyExists) }
        /// The file is a zip archive, but not a document bundle (no `mimetype` entry naming a document type).
        public static var notADocument: Self { Self(.notADocument) }
        /// The file is not a zip archive at all (no end-of-central-directory record).
        public static var notAZipArchive: Self { Self(.notAZipArchive) }
        /// The zip structure is inconsistent: bad signatures, offsets outside the file, headers that disagree.
        public static var corruptArchive: Self { Self(.corruptArchive) }
        /// The archive ends before the data its directory describes.
        public static var truncatedArchive: Self { Self(.truncatedArchive) }
        /// An entry name tries to leave the bundle: `..`, a leading `/`, or a drive letter.
        public static var pathTraversal: Self { Self(.pathTraversal) }
        /// An entry name is not valid: not UTF-8, too long, a backslash, an empty or `.` component, a NUL.
        public static var invalidEntryName: Self { Self(.invalidEntryName) }
        /// Two entries have the same name.
        public static var duplicateEntry: Self { Self(.duplicateEntry) }
        /// An entry is a symbolic link, a device or another kind of file that is not a regular file.
        public static var nonRegularEntry: Self { Self(.nonRegularEntry) }
        /// An entry is encrypted.
        public static var encryptedEntry: Self { Self(.encryptedEntry) }
        /// An entry uses a compression method other than stored (0) or deflate (8).
        public static var unsupportedCompression: Self { Self(.unsupportedCompression) }
        /// An entry's name is not one the format allows (version 1 has four top-level names).
        public static var entryNotAllowed: Self { Self(.entryNotAllowed) }
        /// A required entry (`mimetype`, `DocumentMetadata.json`, `StoreContent/persistentStore`) is missing.
        public static var missingEntry: Self { Self(.missingEntry) }
        /// Two entries share bytes of the file (the shape of an overlapping zip bomb).
        public static var overlappingEntries: Self { Self(.overlappingEntries) }
        /// A reading limit was reached: entry count, name length, total size or compression ratio.
        public static var limitExceeded: Self { Self(.limitExceeded) }
        /// A CRC-32 or SHA-256 does not match.
        public static var checksumMismatch: Self { Self(.checksumMismatch) }
        /// An entry's data is not as long as its header or the metadata says.
        public static var sizeMismatch: Self { Self(.sizeMismatch) }
        /// The archive does not start with an entry (bytes prefixed to it). A bundle whose first entry is another one
        /// than `mimetype` (another zip tool's repack) is read, with a notice (``BundleReader/notices``).
        public static var mimetypeNotFirst: Self { Self(.mimetypeNotFirst) }
        /// The `mimetype` entry's content is not a media type of 1 to 255 bytes. (One that is compressed, has an extra
        /// field or a data descriptor is read, with a notice.)
        public static var invalidMimetype: Self { Self(.invalidMimetype) }
        /// The `mimetype` entry and the metadata's `mediaType` differ.
        public static var mediaTypeMismatch: Self { Self(.mediaTypeMismatch) }
        /// `DocumentMetadata.json` is not valid JSON of the documented shape.
        public static var invalidMetadata: Self { Self(.invalidMetadata) }
        /// The metadata describes entries or a store that are not what the bundle holds.
        public static var metadataMismatch: Self { Self(.metadataMismatch) }
        /// A newer version of the format wrote the bundle.
        public static var newerFormat: Self { Self(.newerFormat) }
        /// The store is not a SQLite database.
        public static var notSQLite: Self { Self(.notSQLite) }
        /// The store is a SQLite database that fails SQLite's own checks.
        public static var storeCorrupt: Self { Self(.storeCorrupt) }
        /// The store inside a bundle is in WAL mode, which the format forbids at rest.
        public static var storeInWALMode: Self { Self(.storeInWALMode) }
        /// Reading or writing a file failed (disk full, permissions, I/O error).
        public static var ioFailure: Self { Self(.ioFailure) }
        /// A file could not be created where it was asked for.
        public static var cannotCreate: Self { Self(.cannotCreate) }
        /// Another writer holds the document.
        public static var inUse: Self { Self(.inUse) }
        /// The file is not a legacy SQLite store that can be converted.
        public static var notALegacyStore: Self { Self(.notALegacyStore) }
        /// The store is being written by another process.
        public static var storeBusy: Self { Self(.storeBusy) }
        /// A copy did not match its source after it was made.
        public static var verificationFailed: Self { Self(.verificationFailed) }
        /// The document's model (compatibility level or migrations) is newer than this app knows; open it read-only.
        public static var newerModel: Self { Self(.newerModel) }
        /// A migration threw; the document on disk is unchanged.
        public static var migrationFailed: Self { Self(.migrationFailed) }
        /// A legacy store was found for a document but could not be converted.
        public static var legacyConversionFailed: Self { Self(.legacyConversionFailed) }
        /// A folder of SQL migrations breaks the naming scheme: a file name that is not `V<version>__<description>.sql`,
        /// two files with the same version, an empty or unreadable file.
        public static var invalidMigrations: Self { Self(.invalidMigrations) }
        /// An applied migration no longer matches its file (edited, renamed or removed), or a new file sorts before one
        /// already applied; nothing is applied until the folder and the documents agree again.
        public static var migrationChanged: Self { Self(.migrationChanged) }
        /// The ``Document`` was closed; open it again to use it.
        public static var closed: Self { Self(.closed) }
        /// The operation writes, and the ``Document`` was opened read-only (or its editing is disabled).
        public static var readOnly: Self { Self(.readOnly) }
        /// The document was made with another app's model (its model name differs from the migrator's); it can be
        /// opened read-only, never migrated or relabelled.
        public static var modelMismatch: Self { Self(.modelMismatch) }
        /// The document's media type is not the one this app writes (``Document/OpenOptions/mediaType``); it can be
        /// opened read-only.
        public static var documentTypeMismatch: Self { Self(.documentTypeMismatch) }
        /// A value given to the library is outside what it accepts (a deflate level of 12, a shard 5 of 4); nothing
        /// was done. The reason names the value and what is accepted.
        public static var invalidArgument: Self { Self(.invalidArgument) }
    }

    /// What went wrong.
    public let code: Code
    /// The file concerned: the bundle, the store, or the destination.
    public let path: FilePath?
    /// The archive entry concerned, when there is one.
    public let entry: String?
    /// The lower-level error that caused this one.
    public let underlyingError: (any Error & Sendable)?
    /// What happened and what the user can do, without the path and entry.
    public let reason: String

    @_spi(Core) public init(
        _ code: Code, path: FilePath?, entry: String? = nil, reason: String,
        underlyingError: (any Error & Sendable)? = nil
    ) {
        self.code = code
        self.path = path
        self.entry = entry
        self.reason = reason
        self.underlyingError = underlyingError
    }

    /// One line: `<path>: <entry>: <reason> (<underlying error>)`.
    ///
    /// The underlying error is summarised in words: SQLite's own message (`SQLite error 11: database disk image is
    /// malformed`), never the statement the library ran; a JSON decoding failure as where and what.
    public var description: String {
        var parts: [String] = []
        if let path { parts.append(path.string) }
        if let entry { parts.append(Self.printable(entry)) }
        parts.append(reason)
        var line = parts.joined(separator: ": ")
        if let underlyingError { line += " (\(Self.summary(of: underlyingError)))" }
        return line
    }

    /// A lower-level error in one short phrase a person can read.
    @_spi(Core) public static func summary(of error: any Error) -> String {
        switch error {
        case let error as any _ShortlySummarized:
            return error.shortSummary
        case let error as DecodingError:
            return summary(of: error)
        default:
            return "\(error)"
        }
    }

    /// A JSON decoding failure as "<key path> <what>" (`items[3].size must be a whole number, found a string`),
    /// without Swift's type names.
    @_spi(Core) public static func summary(of error: DecodingError) -> String {
        let problem = fieldProblem(error)
        return problem.key.map { "\($0) \(problem.what)" } ?? problem.what
    }

    /// A JSON decoding failure in the user's terms: the dotted key it is at (`model.name`, `items[3].source`; `nil`
    /// at the top) and what is wrong there, without Swift's type names: "must be a whole number, found a string",
    /// "is missing".
    @_spi(Core) public static func fieldProblem(_ error: DecodingError) -> (key: String?, what: String) {
        let keys: [any CodingKey]
        let what: String
        switch error {
        case .dataCorrupted(let value):
            keys = value.codingPath
            if value.codingPath.isEmpty {
                what = "the file is not valid JSON"
            } else if value.debugDescription.contains("UUID") {
                what = "must be a UUID such as \"E621E1F8-C36C-495A-93FC-0C247A3E6E5F\""
            } else {
                what = value.debugDescription
            }
        case .keyNotFound(let key, let value):
            keys = value.codingPath + [key]
            what = "is missing"
        case .typeMismatch(let type, let value):
            keys = value.codingPath
            what = "must be \(kind(of: type)), found \(found(in: value.debugDescription))"
        case .valueNotFound(let type, let value):
            keys = value.codingPath
            what = "must be \(kind(of: type)), found null"
        @unknown default:
            return (nil, "the JSON is not of the expected shape")
        }
        // > `items[3].size`: an index follows its key without a dot.
        let key = keys.isEmpty ? nil : keys.enumerated().map { position, key in
            key.intValue.map { "[\($0)]" } ?? (position == 0 ? key.stringValue : "." + key.stringValue)
        }.joined()
        return (key, what)
    }

    /// A JSON kind in words, for a Swift type the decoder expected.
    private static func kind(of type: Any.Type) -> String {
        switch type {
        case is Int.Type, is Int8.Type, is Int16.Type, is Int32.Type, is Int64.Type,
             is UInt.Type, is UInt8.Type, is UInt16.Type, is UInt32.Type, is UInt64.Type:
            return "a whole number"
        case is Double.Type, is Float.Type: return "a number"
        case is String.Type: return "a string"
        case is Bool.Type: return "true or false"
        default:
            let name = "\(type)"
            if name.hasPrefix("Array") || name.hasPrefix("[") || name.contains("UnkeyedDecodingContainer") { return "a list" }
            return "an object"
        }
    }

    /// The JSON kind Foundation's message says it found ("Expected to decode Int but found a string instead."), in
    /// JSON's words.
    private static func found(in description: String) -> String {
        guard let start = description.firstRange(of: "found "),
              let end = description[start.upperBound...].firstRange(of: " instead")
        else { return "another kind of value" }
        // > Foundation writes "a string" in one message and "number" in another.
        var word = String(description[start.upperBound..<end.lowerBound])
        for article in ["a ", "an "] where word.hasPrefix(article) { word.removeFirst(article.count) }
        switch word.lowercased() {
        case "dictionary", "object": return "an object"
        case "array": return "a list"
        case "bool", "boolean": return "true or false"
        case "null", "nil": return "null"
        case let other: return "a " + other
        }
    }

    /// An entry name as a terminal can show it: control characters (a NUL, an escape sequence, a line break) written
    /// as `\u{…}`, so a hostile name neither hides its end nor moves the cursor.
    @_spi(Core) public static func printable(_ name: String) -> String {
        guard name.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else { return name }
        return name.unicodeScalars.map { scalar in
            scalar.value < 0x20 || scalar.value == 0x7F ? "\\u{\(String(scalar.value, radix: 16))}" : String(scalar)
        }.joined()
    }

    /// The same line as ``description``, so that `error.localizedDescription` in an app says what happened.
    public var errorDescription: String? { description }

    /// What failed, without the underlying error: `<path>: <entry>: <reason>`.
    public var failureReason: String? {
        ([path?.string, entry].compactMap { $0 } + [reason]).joined(separator: ": ")
    }
}

extension DocumentError {
    /// An I/O failure; a full disk (or quota) says so in words: "no space left on the device while …".
    @_spi(Core) public static func io(
        _ what: String, path: FilePath?, entry: String? = nil, errno: Errno? = nil
    ) -> DocumentError {
        if let errno, errno == .noSpace || errno == .diskQuotaExceeded {
            return DocumentError(.ioFailure, path: path, entry: entry,
                                 reason: "no space left on the device (\(errno == .noSpace ? "the disk is full" : "the quota is used up")) while trying: \(what); free some space and run it again",
                                 underlyingError: errno)
        }
        return DocumentError(.ioFailure, path: path, entry: entry, reason: what, underlyingError: errno)
    }

    @_spi(Core) public static func corrupt(_ reason: String, path: FilePath?, entry: String? = nil) -> DocumentError {
        DocumentError(.corruptArchive, path: path, entry: entry,
                      reason: reason + "; the bundle is damaged, restore it from a backup")
    }
}

/// An error of a layer above the core that names itself in one short phrase where a ``DocumentError`` gives it as its
/// cause: the library's SQLite errors, through GRDB (the core has no GRDB). Public only so that the library can conform
/// GRDB's type to it; nothing else needs it.
@_documentation(visibility: internal)
public protocol _ShortlySummarized: Error {
    /// The error in one short phrase.
    var shortSummary: String { get }
}
