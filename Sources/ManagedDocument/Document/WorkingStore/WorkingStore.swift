import GRDB
import SystemPackage
@_spi(Core) import MDZCore

/// How an open ``Document`` holds its store, the one place that knows it: served from the bundle in place
/// (``ServedWorkingStore``, read-only), extracted into the working copy (``ExtractedWorkingStore``), or composed by
/// an overlay over the bundle (``OverlayWorkingStore``, FORMAT.md 16.2). The document keeps the public API, the
/// state machine, autosave and the locks, and asks its working store for the rest: the change counter, the save's
/// input, the revert, the close.
///
/// Each one takes its own lock only, never while the document's is held, and never holds it while it calls out.
protocol WorkingStore: AnyObject, Sendable {
    /// The store's file change counter now, read without SQLite (``StoreHeader/changeCounterRange``).
    ///
    /// - Throws: ``DocumentError/Code/closed`` once ``close()`` ran; ``DocumentError/Code/storeCorrupt`` when the
    ///   header is cut short.
    func changeCounter() throws -> UInt32

    /// Why the last failed read of the bundle failed, for a store SQLite reads from it in place (a segment that does
    /// not match its digest); `nil` otherwise.
    var readFailure: DocumentError? { get }

    /// Writes the bundle at the document's path from the store (the writers held, `db` their connection), with
    /// `folders` and `metadata`, and renames it into place; the metadata written and how.
    func save(metadata: DocumentMetadata, folders: BundleContent, _ db: Database) throws
    -> (DocumentMetadata, SaveReport)

    /// For a writable document: what going back to `reader`'s bundle takes, done before the writers are held
    /// (extracting into `scratch`); ``StoreRevert/apply(_:replacing:)`` then puts it under the connection.
    func prepareRevert(to reader: BundleReader, scratch: FilePath) throws -> StoreRevert

    /// For a read-only document: points the connection at `reader`'s bundle as it is now, replacing the store of
    /// digest `current` (`checkOpen` throws when the document closed meanwhile).
    func reload(from reader: BundleReader, queue: DatabaseQueue, replacing current: String,
                checkOpen: @escaping @Sendable () throws -> Void) async throws

    /// Releases the descriptors and registrations it holds (the connection is closed already). Later calls of
    /// ``changeCounter()`` throw ``DocumentError/Code/closed``.
    func close()
}

/// A revert prepared outside the writers' barrier: the bundle's other entries extracted, and what puts its store
/// under the connection. Dropping it releases what it opened.
final class StoreRevert: @unchecked Sendable {
    /// The bundle's external data and additional content, extracted, to put in place of the working copy's.
    let folders: ExtractedBundle
    private let applying: (Database, String) throws -> Void
    private let releasing: () -> Void

    init(folders: ExtractedBundle, apply: @escaping (Database, String) throws -> Void,
         release: @escaping () -> Void = {}) {
        self.folders = folders
        self.applying = apply
        self.releasing = release
    }

    deinit { releasing() }

    /// Puts the bundle's store under `db`, the connection (the writers held, the bundle still the one prepared),
    /// in place of the store of digest `current` the document has open.
    func apply(_ db: Database, replacing current: String) throws { try applying(db, current) }
}

extension WorkingStore {
    /// The error of a call on a closed store.
    static func closed(_ path: FilePath) -> DocumentError {
        DocumentError(.closed, path: path, reason: "the document is closed; open it again to use it")
    }

    /// The change counter in `bytes`, the 4 bytes read at ``StoreHeader/changeCounterRange`` of the store at `path`.
    static func changeCounter(_ bytes: [UInt8], path: FilePath) throws -> UInt32 {
        guard let counter = StoreHeader.changeCounter(bytes) else {
            throw DocumentError(.storeCorrupt, path: path, reason: "the working copy's header is cut short")
        }
        return counter
    }

    /// Refuses a store of other content than the one under the connection (`current`, its digest) whose header
    /// SQLite cannot tell from it (``StoreHeader/stateRange``): it would keep the old one's cached pages and schema.
    static func checkHeadersDiffer(old: any StoreSource, new: any StoreSource, newDigest: String, current: String,
                                   path: FilePath) throws {
        guard newDigest != current else { return }
        if StoreHeader.statesCollide(try stateBytes(old), try stateBytes(new)) {
            throw DocumentError(.ioFailure, path: path,
                                reason: "the bundle now holds another store whose SQLite header cannot be told from the open one's; close the document and open it again")
        }
    }

    /// The ``StoreHeader/stateRange`` bytes of `source` (fewer when it is shorter).
    static func stateBytes(_ source: any StoreSource) throws -> [UInt8] {
        let range = StoreHeader.stateRange
        var bytes = [UInt8](repeating: 0, count: range.count)
        let read = try bytes.withUnsafeMutableBytes {
            try source.read(into: $0.baseAddress!, count: range.count, at: Int64(range.lowerBound))
        }
        return Array(bytes.prefix(read))
    }
}
