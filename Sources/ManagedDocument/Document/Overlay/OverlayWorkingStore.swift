#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import GRDB
import GRDBSQLite
import Logging
import SystemPackage
@_spi(Core) import MDZCore

extension OverlayStore: LayeredStore {}

/// The store of a writable document served from its bundle (FORMAT.md 16.2): SQLite opens the store an
/// ``OverlayStore`` composes, the bundle's pages as the base and the pages written since in the working copy's
/// `overlay`; nothing of the store is extracted. Saves copy the restart segments no page touched unread (13.1), and
/// the overlay then lies over the bundle just saved, under the same connection.
final class OverlayWorkingStore: EditableStore {
    /// The document's bundle.
    private let path: FilePath
    private let workingCopy: WorkingCopy
    private let options: Document.OpenOptions
    private struct State {
        /// The registration of the overlay SQLite opened; `nil` once closed (the overlay's files go with it).
        var registration: OverlayStore.Registration?
        /// The reader of the bundle the overlay's base is, when a save may copy its segments; `nil` over an
        /// extracted base.
        var base: BundleReader?
    }
    private let state: Protected<State>

    init(path: FilePath, workingCopy: WorkingCopy, options: Document.OpenOptions,
         registration: OverlayStore.Registration, base: BundleReader?) {
        self.path = path
        self.workingCopy = workingCopy
        self.options = options
        state = Protected(State(registration: registration, base: base))
    }

    /// The overlay, while open.
    func overlay() throws -> OverlayStore {
        guard let store = state.withLock({ $0.registration?.store }) else { throw Self.closed(path) }
        return store
    }

    func changeCounter() throws -> UInt32 { try overlay().changeCounter() }

    var readFailure: DocumentError? { nil }

    /// Saves (the writers held, `db` the connection): the bundle written from the composed store, a pending-base
    /// record appended before it is renamed into place, then the overlay reset onto it.
    func save(metadata: DocumentMetadata, folders: BundleContent, _ db: Database) throws
    -> (DocumentMetadata, SaveReport) {
        let overlay = try overlay()
        var request = BundleWriter.Request(
            .layered(overlay, base: options.savesIncrementally ? state.withLock { $0.base } : nil,
                      whyWhole: options.savesIncrementally ? "the working copy's base bundle is unknown"
                        : "incremental saves are off"),
            folders: folders, metadata: metadata, to: path, options: options.saving)
        request.replacingExisting = true
        request.storeFacts = try StoreInspector.facts(db, countingRows: false)
        let staged = try BundleWriter.stage(request)
        let saved = staged.metadata
        // > Before the rename: after a crash between it and the reset, recovery knows this bundle holds the
        // > overlay's content.
        try overlay.appendPendingBase(digest: saved.store.contentDigest)
        let written = try staged.commit()
        rebase(overlay, onto: written?.identity)
        return (saved, staged.report)
    }

    /// Lays the overlay over the bundle a save just put in place (`identity`, taken after the rename), emptied: what
    /// SQLite sees is unchanged, since that bundle holds it. When the file there is not that one any more, or
    /// cannot be served in place, the overlay stays over its old base (still open, still right), and the next save
    /// is full; a reset that failed before its new map was in place is logged, and leaves the overlay over its old
    /// base too (recovery finds the saved bundle by the pending-base record).
    private func rebase(_ overlay: OverlayStore, onto identity: FileIdentity?) {
        do {
            let reader = try BundleReader(at: path, limits: options.limits)
            guard reader.openedIdentity == identity, case .inPlace(let plan) = StoreRoute(reader, inPlaceUnavailable: StoreRoute.inPlaceUnavailable) else {
                options.logger.notice("\(path): the saved bundle is not served in place; the next save is full")
                return
            }
            let source = InPlaceStore(reader, plan: plan, cacheSize: BundleStore.defaultCacheSize)
            try overlay.reset(newBase: source, identity: OverlayMap.BaseIdentity(reader.openedIdentity),
                              digest: reader.metadata.store.contentDigest)
            let replaced = state.withLock { state -> BundleReader? in
                defer { state.base = reader }
                return state.base
            }
            FileSystem.retire([], [replaced])
        } catch {
            options.logger.warning("\(path): the working copy could not be laid over the saved bundle: \(error)")
        }
    }

    /// Extracts the bundle's other entries; applying resets the overlay onto the bundle as it is now (emptied).
    /// SQLite sees the bundle's store from its next read on (it compares the header's change counter, and drops its
    /// cache).
    func prepareRevert(to reader: BundleReader, scratch: FilePath) throws -> StoreRevert {
        guard case .inPlace(let plan) = StoreRoute(reader, inPlaceUnavailable: StoreRoute.inPlaceUnavailable) else {
            throw DocumentError(.ioFailure, path: path,
                                reason: "the bundle on disk can no longer be served in place; close the document and open it again")
        }
        let overlay = try overlay()
        let extracted = try reader.extract(into: scratch, permissions: [.ownerReadWrite], skippingStore: true)
        let source = InPlaceStore(reader, plan: plan, cacheSize: BundleStore.defaultCacheSize)
        return StoreRevert(folders: extracted) { [state, path] db, current in
            let digest = reader.metadata.store.contentDigest
            // > The same store as the base's: SQLite's cache holds its pages, or pages of a later change counter.
            try Self.checkHeadersDiffer(old: overlay, new: source, newDigest: digest, current: current, path: path)
            try overlay.reset(newBase: source, identity: OverlayMap.BaseIdentity(reader.openedIdentity), digest: digest)
            db.clearSchemaCache()
            _ = sqlite3_db_release_memory(db.sqliteConnection)
            state.withLock { $0.base = reader }
        }
    }

    func close() {
        let (registration, base) = state.withLock { state -> (OverlayStore.Registration?, BundleReader?) in
            defer { (state.registration, state.base) = (nil, nil) }
            return (state.registration, state.base)
        }
        withExtendedLifetime((registration, base)) {}  // released here, outside the lock
    }
}
