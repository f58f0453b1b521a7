import GRDB
import SystemPackage
@_spi(Core) import MDZCore

/// The store extracted into the working copy (`content/StoreContent/persistentStore`): a writable open of a bundle
/// that cannot be served in place, a recovered extracted copy, or a read-only open of a bundle that cannot be
/// served. Its change counter is read through a descriptor of its own (never through SQLite); a save packs the
/// file, reusing the unchanged segments of the bundle this open last verified while the file there still holds it
/// (FORMAT.md 16.1).
final class ExtractedWorkingStore: EditableStore, FollowingStore {
    /// The document's bundle.
    private let path: FilePath
    private let workingCopy: WorkingCopy
    private let options: Document.OpenOptions
    private struct State {
        /// The store's file, read only for its change counter; `nil` once closed.
        var header: StoreFileReader?
        /// The loan of the bundle file made when this open last verified all of it (extracted it, or wrote it): a
        /// save reuses its unchanged segments while the file at ``path`` still holds it.
        var loan: SegmentLoan?
    }
    private let state: Protected<State>

    /// Opens the working copy's store for its change counter.
    init(path: FilePath, workingCopy: WorkingCopy, options: Document.OpenOptions, loan: SegmentLoan?) throws {
        self.path = path
        self.workingCopy = workingCopy
        self.options = options
        state = Protected(State(header: try StoreFileReader(workingCopy.store), loan: loan))
    }

    deinit { close() }

    func changeCounter() throws -> UInt32 {
        // > Read under the lock: close() cannot close the descriptor in between.
        try state.withLock { state in
            guard let header = state.header else { throw Self.closed(path) }
            return try header.changeCounter()
        }
    }

    var readFailure: DocumentError? { nil }

    /// Packs the working copy's store (reusing the segments of the bundle this open last verified, while it is
    /// still there) and renames the bundle into place.
    func save(metadata: DocumentMetadata, folders: BundleContent, _ db: Database) throws
    -> (DocumentMetadata, SaveReport) {
        let loan = options.savesIncrementally ? state.withLock { $0.loan } : nil
        var request = BundleWriter.Request(.file(workingCopy.store, reusing: loan), folders: folders,
                                           metadata: metadata, to: path, options: options.saving)
        request.replacingExisting = true
        let staged = try BundleWriter.stage(request)
        let written = try staged.commit()
        state.withLock { $0.loan = written }
        return (staged.metadata, staged.report)
    }

    /// Extracts the bundle, every segment checked (the loan of a later incremental save); applying copies its store
    /// into the connection's file through SQLite's backup API, so the connection and its observations stay.
    func prepareRevert(to reader: BundleReader, scratch: FilePath) throws -> StoreRevert {
        let (extracted, loan) = try reader.extractVerifying(into: scratch, forReuse: options.savesIncrementally)
        let source = try Self.openReadOnly(extracted.store)
        return StoreRevert(folders: extracted, apply: { [state] db, _ in
            try source.read { sourceDB in try sourceDB.backup(to: db) }
            state.withLock { $0.loan = loan }
        }, release: {
            try? source.close()  // Squash close error of a read-only connection.
        })
    }

    /// Copies the bundle's store into the working copy's file: the read-only connection cannot be written, so a
    /// connection of this store's own copies the pages into the same file, and the read-only one reads them at its
    /// next access (SQLite checks the file change counter).
    func reload(from reader: BundleReader, queue: DatabaseQueue, replacing current: String,
                checkOpen: @escaping @Sendable () throws -> Void) async throws {
        let scratch = try FileSystem.makeTemporaryDirectory(in: workingCopy.directory, prefix: "revert-")
        defer { try? FileSystem.removeTree(scratch) }  // Squash cleanup error: the revert's outcome is what counts.
        let (extracted, _) = try reader.extractVerifying(into: scratch.appending("content"),
                                                         forReuse: options.savesIncrementally)
        let source = try Self.openReadOnly(extracted.store)
        defer { try? source.close() }  // Squash close error of a read-only connection.
        let target = try DatabaseQueue(path: workingCopy.store.string)
        try source.backup(to: target)
        try target.close()
        try await queue.read { db in db.clearSchemaCache() }
    }

    func close() {
        let header = state.withLock { state -> StoreFileReader? in
            defer { state.header = nil }
            return state.header
        }
        withExtendedLifetime(header) {}  // its descriptor closed here, outside the lock
    }

    private static func openReadOnly(_ store: FilePath) throws -> DatabaseQueue {
        var configuration = Configuration()
        configuration.readonly = true
        return try DatabaseQueue(path: store.string, configuration: configuration)
    }
}
