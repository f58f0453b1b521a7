import GRDB
import SystemPackage
@_spi(Core) import MDZCore

/// How an open ``Document`` holds its store, the one place that knows it: served from the bundle in place
/// (``ServedWorkingStore``, read-only), extracted into the working copy (``ExtractedWorkingStore``), or composed by
/// an overlay over the bundle (``OverlayWorkingStore``, FORMAT.md 16.2). The document keeps the public API, the
/// state machine, autosave and the locks, and asks its working store for the rest.
///
/// Split by ability, as GRDB splits `DatabaseReader` and `DatabaseWriter`: every working store reads (this
/// protocol); a read-only document's follows its bundle (``FollowingStore``); a writable document's saves and
/// reverts (``EditableStore``). No store claims an ability it does not have.
///
/// Each one takes its own lock only, never while the document's is held, and never holds it while it calls out.
protocol WorkingStore: AnyObject, Sendable {
    /// The store's file change counter now, read without SQLite (``StoreReader/changeCounter()``).
    ///
    /// - Throws: ``DocumentError/Code/closed`` once ``close()`` ran; ``DocumentError/Code/storeCorrupt`` when the
    ///   header is cut short.
    func changeCounter() throws -> UInt32

    /// Why the last failed read of the bundle failed, for a store SQLite reads from it in place (a segment that does
    /// not match its digest); `nil` otherwise.
    var readFailure: DocumentError? { get }

    /// Releases the descriptors and registrations it holds (the connection is closed already). Later calls of
    /// ``changeCounter()`` throw ``DocumentError/Code/closed``.
    func close()
}

/// The store of a read-only document: it is never saved; a revert points it at the bundle as it is now.
protocol FollowingStore: WorkingStore {
    /// Points the connection at `reader`'s bundle as it is now, replacing the store of digest `current`
    /// (`checkOpen` throws when the document closed meanwhile).
    func reload(from reader: BundleReader, queue: DatabaseQueue, replacing current: String,
                checkOpen: @escaping @Sendable () throws -> Void) async throws
}

/// The store of a writable document: it saves into the bundle and reverts to it.
protocol EditableStore: WorkingStore {
    /// Writes the bundle at the document's path from the store (the writers held, `db` their connection), with
    /// `folders` and `metadata`, and renames it into place; the metadata written and how.
    func save(metadata: DocumentMetadata, folders: BundleContent, _ db: Database) throws
    -> (DocumentMetadata, SaveReport)

    /// What going back to `reader`'s bundle takes, done before the writers are held (extracting into `scratch`);
    /// ``StoreRevert/apply(_:replacing:)`` then puts it under the connection.
    func prepareRevert(to reader: BundleReader, scratch: FilePath) throws -> StoreRevert
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

    /// Refuses a store of other content than the one under the connection (`current`, its digest) whose header
    /// SQLite cannot tell from it (``StoreHeader/stateRange``): it would keep the old one's cached pages and schema.
    static func checkHeadersDiffer(old: any StoreReader, new: any StoreReader, newDigest: String, current: String,
                                   path: FilePath) throws {
        guard newDigest != current else { return }
        if StoreHeader.statesCollide(try old.stateBytes(), try new.stateBytes()) {
            throw DocumentError(.ioFailure, path: path,
                                reason: "the bundle now holds another store whose SQLite header cannot be told from the open one's; close the document and open it again")
        }
    }
}
