import SystemPackage

/// The names and constants of the bundle format, version 1, spelled once.
///
/// A bundle is a zip archive whose first entry is `mimetype` (stored, no extra field, content at byte 38), holding
/// `DocumentMetadata.json`, the SQLite store at `StoreContent/persistentStore`, and optionally Core Data external
/// data under `StoreContent/.persistentStore_SUPPORT/_EXTERNAL_DATA/` and app files under `AdditionalContent/`.
/// See `docs/FORMAT.md` for the normative rules.
public enum BundleLayout {
    /// The first entry: the media type, ASCII, stored.
    public static let mimetype = ZipContainer.mimetypeEntryName
    /// The metadata entry: UTF-8 JSON, ``DocumentMetadata``.
    public static let metadata = "DocumentMetadata.json"
    /// The SQLite store entry.
    public static let store = "StoreContent/persistentStore"
    /// The folder of the store and its external data.
    public static let storeFolder = "StoreContent/"
    /// The prefix of Core Data external binary data entries.
    public static let externalDataPrefix = "StoreContent/.persistentStore_SUPPORT/_EXTERNAL_DATA/"
    /// The prefix of app files that travel with the document.
    public static let additionalContentPrefix = "AdditionalContent/"
    /// The media type written when the app names none.
    public static let defaultMediaType = "application/vnd.managed-document+zip"
    /// The file name extension written when the app names none.
    public static let defaultExtension = "mdz"
    /// The value of the metadata's `format` key.
    public static let formatName = "managed-document"
    /// The format version this library writes unless told otherwise: 3 (FORMAT.md 13.2). Versions 1 and 2 are read
    /// too, and version 2 is written when a writer is asked for it (``WritingOptions/formatVersion``).
    public static let formatVersion = 3
    /// The newest format version this library reads and writes: 3, whose store index entry (``storeIndex``) holds
    /// the segment records (FORMAT.md 13.2).
    public static let newestFormatVersion = 3
    /// The store index entry of format version 3 (FORMAT.md 13.2).
    public static let storeIndex = "StoreContent/persistentStore.index"
    /// The byte offset of the media type in every bundle: 30-byte local header plus the 8 bytes of `mimetype`.
    public static let mediaTypeOffset = 38

    /// The part of the layout an entry belongs to.
    @_spi(Core) public enum Role: Equatable, Sendable {
        case mimetype, metadata, store
        /// The store index (format version 3).
        case storeIndex
        case externalData(relativePath: String)
        case additionalContent(relativePath: String)
        /// An explicit folder entry (a name ending in `/`) inside an allowed folder; readers ignore it.
        case directory
    }

    /// Checks an entry name against the format's naming rules and returns its role.
    ///
    /// - Throws: ``DocumentError`` with ``DocumentError/Code/invalidEntryName``,
    ///   ``DocumentError/Code/pathTraversal``, ``DocumentError/Code/limitExceeded`` or
    ///   ``DocumentError/Code/entryNotAllowed``.
    @_spi(Core)
    public static func role(ofEntryNamed raw: [UInt8], maxLength: Int, in bundle: FilePath?) throws -> (String, Role) {
        let shown = String(decoding: raw.prefix(200), as: UTF8.self)
        func refuse(_ code: DocumentError.Code, _ reason: String) -> DocumentError {
            DocumentError(code, path: bundle, entry: shown, reason: reason)
        }
        guard !raw.isEmpty else { throw refuse(.invalidEntryName, "an entry has an empty name") }
        guard raw.count <= maxLength else {
            throw refuse(.limitExceeded, "the entry name is longer than \(maxLength) bytes")
        }
        guard let name = String(validating: raw, as: UTF8.self) else {
            throw refuse(.invalidEntryName, "the entry name is not valid UTF-8")
        }
        if raw.contains(0x5C) { throw refuse(.invalidEntryName, "the entry name contains a backslash") }
        if raw.contains(where: { $0 < 0x20 || $0 == 0x7F }) {
            throw refuse(.invalidEntryName, "the entry name contains a control character")
        }
        if raw.first == 0x2F { throw refuse(.pathTraversal, "the entry name is an absolute path") }
        if raw.count >= 2, raw[1] == 0x3A, (0x41...0x5A).contains(raw[0] & 0xDF) {
            throw refuse(.pathTraversal, "the entry name starts with a drive letter")
        }
        let isDirectory = name.hasSuffix("/")
        let components = (isDirectory ? String(name.dropLast()) : name).split(separator: "/", omittingEmptySubsequences: false)
        if components.contains("..") { throw refuse(.pathTraversal, "the entry name contains a '..' component") }
        if components.contains(where: { $0.isEmpty || $0 == "." }) {
            throw refuse(.invalidEntryName, "the entry name has an empty or '.' component")
        }
        if components.contains(where: { $0.contains(":") }) {
            throw refuse(.invalidEntryName, "the entry name contains ':'")
        }

        if isDirectory {
            let allowedFolders = ["StoreContent/", "StoreContent/.persistentStore_SUPPORT/", externalDataPrefix,
                                  additionalContentPrefix]
            if allowedFolders.contains(name) || name.hasPrefix(externalDataPrefix)
                || name.hasPrefix(additionalContentPrefix) {
                return (name, .directory)
            }
            throw refuse(.entryNotAllowed, "the format does not allow this folder")
        }
        switch name {
        case mimetype: return (name, .mimetype)
        case metadata: return (name, .metadata)
        case store: return (name, .store)
        case storeIndex: return (name, .storeIndex)
        default:
            if name.hasPrefix(externalDataPrefix) {
                return (name, .externalData(relativePath: String(name.dropFirst(externalDataPrefix.count))))
            }
            if name.hasPrefix(additionalContentPrefix) {
                return (name, .additionalContent(relativePath: String(name.dropFirst(additionalContentPrefix.count))))
            }
            throw refuse(.entryNotAllowed, "the format (up to version \(newestFormatVersion)) does not allow this entry")
        }
    }
}
