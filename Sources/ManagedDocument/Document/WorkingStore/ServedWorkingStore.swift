import GRDB
import GRDBSQLite
import Logging
import SystemPackage
@_spi(Core) import MDZCore

/// The store of a read-only document, which SQLite reads straight from the bundle (no working copy of the store):
/// the registration of the VFS file it reads, which a revert points at the bundle as it is now. Kept as long as the
/// document, and with it the bundle's descriptor; released with the document.
final class ServedWorkingStore: FollowingStore {
    private let registration: StoreSlot.Registration
    /// The document's working folder (where a bundle that cannot be served in place is extracted on a reload).
    private let workingCopy: WorkingCopy
    private let logger: Logger

    init(_ registration: StoreSlot.Registration, workingCopy: WorkingCopy, logger: Logger) {
        self.registration = registration
        self.workingCopy = workingCopy
        self.logger = logger
    }

    func changeCounter() throws -> UInt32 { try registration.slot.source.changeCounter() }

    var readFailure: DocumentError? { registration.slot.source.failure }

    /// Points the slot at the bundle as it is now: served segment by segment when it allows, its store extracted
    /// into the working folder otherwise. SQLite reads the new header's change counter at its next read and drops
    /// its page cache; the caches are released now too.
    func reload(from reader: BundleReader, queue: DatabaseQueue, replacing current: String,
                checkOpen: @escaping @Sendable () throws -> Void) async throws {
        let slot = registration.slot
        var folder: FilePath?
        // > An extracted store is removed once open: the descriptor keeps it readable, and nothing piles up revert
        // > after revert.
        defer { if let folder { try? FileSystem.removeTree(folder) } }  // Squash cleanup error: the reload counts.
        let source = try ReadOnlyConnection.source(reader, cacheSize: BundleStore.defaultCacheSize, logger: logger) {
            let made = try FileSystem.makeTemporaryDirectory(in: workingCopy.directory, prefix: "reloaded-")
            folder = made
            return try reader.extract(into: made.appending("content"), permissions: [.ownerReadWrite]).store
        }
        try Self.checkHeadersDiffer(old: slot.source, new: source, newDigest: reader.metadata.store.contentDigest,
                                    current: current, path: reader.path)
        // > Swapped while the queue runs nothing else: no read sees pages of both stores, none starts with stale ones.
        try await queue.writeWithoutTransaction { db in
            try checkOpen()
            slot.replace(with: source)
            db.clearSchemaCache()
            _ = sqlite3_db_release_memory(db.sqliteConnection)
        }
    }

    func close() {}
}
