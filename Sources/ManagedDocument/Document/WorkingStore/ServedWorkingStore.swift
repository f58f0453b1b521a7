import GRDB
import GRDBSQLite
import Logging
import SystemPackage
@_spi(Core) import MDZCore

/// The store of a read-only document, which SQLite reads straight from the bundle (no working copy of the store):
/// the registration of the VFS file it reads, which a revert points at the bundle as it is now. Kept as long as the
/// document, and with it the bundle's descriptor; released with the document.
final class ServedWorkingStore: WorkingStore {
    private let registration: StoreSlot.Registration
    /// The document's working folder (where a bundle that cannot be served in place is extracted on a reload).
    private let workingCopy: WorkingCopy
    private let logger: Logger

    init(_ registration: StoreSlot.Registration, workingCopy: WorkingCopy, logger: Logger) {
        self.registration = registration
        self.workingCopy = workingCopy
        self.logger = logger
    }

    func changeCounter() throws -> UInt32 {
        let source = registration.slot.source
        var bytes = [UInt8](repeating: 0, count: StoreHeader.changeCounterRange.count)
        let read = try bytes.withUnsafeMutableBytes {
            try source.read(into: $0.baseAddress!, count: $0.count, at: Int64(StoreHeader.changeCounterRange.lowerBound))
        }
        return try Self.changeCounter(Array(bytes.prefix(read)), path: source.origin)
    }

    var readFailure: DocumentError? { registration.slot.source.failure }

    func save(metadata: DocumentMetadata, folders: BundleContent, _ db: Database) throws
    -> (DocumentMetadata, SaveReport) {
        throw DocumentError(.readOnly, path: registration.slot.source.origin, reason: "is open read-only; it cannot be saved")
    }

    func prepareRevert(to reader: BundleReader, scratch: FilePath) throws -> StoreRevert {
        throw DocumentError(.readOnly, path: reader.path, reason: "is open read-only; it is reloaded, not reverted")
    }

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
        let source = try ReadOnlyStore.source(reader, cacheSize: BundleStore.defaultCacheSize, logger: logger) {
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
