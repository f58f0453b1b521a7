@_spi(Core) import MDZCore
/// One item of a batch: a legacy store or package, a bundle converted earlier, or a file that is not a store.
public struct BatchItem: Sendable, Codable, Equatable {
    /// What happened to it.
    public enum Outcome: String, Sendable, Codable, CodingKeyRepresentable, CaseIterable {
        /// Converted into a bundle by this run.
        case converted
        /// Its bundle was already there, made from it by an earlier run (whose unfinished disposal was completed).
        case alreadyDone = "skipped-already-done"
        /// Not a legacy store (the reason says what it is); never touched.
        case notAStore = "not-a-store"
        /// In use by another process past the timeout; nothing was changed. Run again later.
        case busy
        /// The conversion or a migration failed; the error says why and the legacy files are as they were.
        case failed
        /// A dry run would convert it.
        case wouldConvert = "would-convert"
    }

    /// The source, relative to the root (`/`-separated).
    public var source: String
    /// What the item is (``Kind``, written in reports as one word).
    public var kind: Kind
    /// What happened to it.
    public var outcome: Outcome
    /// The bundle, relative to the root, for stores.
    public var bundle: String?
    /// Bytes of the source files (store and sidecars).
    public var bytesIn: Int64 = 0
    /// Bytes of the bundle.
    public var bytesOut: Int64 = 0
    /// Seconds spent on the item.
    public var duration: Double = 0
    /// The bundle's store digest (`store.digest`, FORMAT.md 13.1; `store.sha256` for a version 1 bundle).
    public var storeDigest: String?
    /// SHA-256 of the source's main store file, as converted.
    public var sourceSHA256: String?
    /// Rows in the store, all tables, for items converted by this run.
    public var rows: Int?
    /// Where the legacy files went: `kept`, `deleted`, or the backup folder (relative to the root when inside it).
    public var legacyFiles: String?
    /// Migrations applied by this run.
    public var migrationsApplied: [String]?
    /// Why a file is not a store.
    public var reason: String?
    /// What went wrong, for `busy` and `failed`.
    public var error: Failure?

    /// Why an item is `busy` or `failed`.
    public struct Failure: Sendable, Codable, Equatable {
        /// The error's code, written in reports as its name (`storeBusy`).
        public var code: DocumentError.Code
        /// The error in words, with the path concerned.
        public var message: String

        /// A failure with its code and its line.
        public init(code: DocumentError.Code, message: String) {
            self.code = code
            self.message = message
        }
    }
}
