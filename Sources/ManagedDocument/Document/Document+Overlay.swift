#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import GRDB
import GRDBSQLite
import Logging
import SystemPackage

/// A writable document whose store is served from its bundle (FORMAT.md 16.2): SQLite opens the store an
/// ``OverlayStore`` composes, the bundle's pages as the base and the pages written since in the working copy's
/// `overlay`; nothing of the store is extracted. Saves copy the restart segments no page touched unread (13.1), and
/// the overlay then lies over the bundle just saved, under the same connection.
extension Document {
    /// What an open found in the working copy's folder of the bundle, once it decided what to keep.
    enum Leftover: Equatable {
        /// No folder (none was there, or the one there was discarded).
        case none
        /// An extracted store to recover (a working copy as releases before 16.2 made it).
        case extracted
        /// An overlay and map that lie over the bundle as it is now, to recover; whether they hold changes the
        /// bundle does not have.
        case overlay(hasChanges: Bool)
    }

    /// Decides what to do with the working copy folder a process that died left for `reader`'s bundle (the
    /// document's lock is held): recovered when ``OpenOptions/recovery`` says so and it lies over this bundle's
    /// store (made over it, or over the store a save put in place from it: ``OverlayMap/coverage(ofStoreDigest:size:)``),
    /// decided by the store's digest and size, never by the file's times or the reader's limits; removed otherwise.
    /// An overlay made over another store is refused with ``DocumentError/Code/metadataMismatch``, and nothing is
    /// removed: its changes are in no bundle.
    static func examineWorkingCopy(_ copy: WorkingCopy, reader: BundleReader, options: OpenOptions,
                                   path: FilePath) throws -> Leftover {
        guard FileSystem.isDirectory(copy.directory) else { return .none }
        guard options.recovery == .recover else {
            try WorkingCopy.remove(copy.directory)
            return .none
        }
        let digest = reader.metadata.store.contentDigest
        if let map = try OverlayStore.readMap(in: copy.directory) {
            switch map.coverage(ofStoreDigest: digest, size: reader.metadata.store.size) {
            case .madeOver(let hasChanges), .savedInto(let hasChanges):
                return .overlay(hasChanges: hasChanges)
            case .neither:
                throw DocumentError(.metadataMismatch, path: path,
                                    reason: "a working copy with unsaved changes (left by a process that ended at \(copy.directory)) was made over another version of the document, which has been replaced since; nothing was removed: move that folder away, or open with RecoveryPolicy.discard to drop the changes")
            }
        } else if let base = copy.readBase(), base.storeDigest == digest, FileSystem.isRegularFile(copy.store) {
            return .extracted
        }
        try WorkingCopy.remove(copy.directory)
        return .none
    }

    /// What an overlay lies over: the bundle's store served in place, or (when the reader's limits do not let it be
    /// served in place, and a crashed overlay is recovered) a verified copy of it extracted into the working copy.
    enum OverlayBase {
        case inPlace(SegmentPlan)
        case extracted
    }

    /// The name of the extracted base an overlay recovered under limits that do not serve the bundle in place
    /// lies over, in the working copy's folder.
    static let extractedBaseName = "base-store"

    /// Opens the store of a writable document through an overlay in the working copy's folder over `reader`'s
    /// bundle, served as `base` says: made empty (the bundle's other entries extracted beside it), or recovered as
    /// the last acknowledged commit left it (SQLite rolls a hot journal back). Returns the connection, the overlay's
    /// registration, and the reader a save may copy unchanged segments from (`nil` over an extracted base).
    static func openOverlay(_ copy: WorkingCopy, reader: BundleReader, base: OverlayBase, recovering: Bool)
    throws -> (queue: DatabaseQueue, registration: OverlayStore.Registration, base: BundleReader?) {
        OverlayStore.removeLeftovers(in: copy.directory)
        let source: any StoreSource
        switch base {
        case .inPlace(let plan):
            source = SegmentSource(reader, plan: plan, cacheSize: BundleStore.defaultCacheSize)
        case .extracted:
            let file = copy.directory.appending(extractedBaseName)
            if try FileSystem.exists(file) { try FileSystem.removeFile(file) }
            _ = try reader.extractStore(to: file)
            source = try StoreFile(file)
        }
        let identity = OverlayMap.BaseIdentity(reader.openedIdentity)
        let digest = reader.metadata.store.contentDigest
        let store: OverlayStore
        if recovering {
            store = try OverlayStore.open(folder: copy.directory, base: source, expectedDigest: digest)
        } else {
            _ = try reader.extract(into: copy.content, permissions: [.ownerReadWrite], skippingStore: true)
            try copy.writeBase(WorkingCopy.Base(bundle: reader.path.string, storeDigest: digest))
            store = try OverlayStore.create(folder: copy.directory, base: source,
                                            pageSize: try pageSize(of: source, path: reader.path),
                                            baseIdentity: identity, baseDigest: digest)
        }
        let registration = try OverlayStore.Registration(store)
        var configuration = Configuration()
        configuration.label = "ManagedDocument.document"
        let queue: DatabaseQueue
        do {
            queue = try DatabaseQueue(path: registration.uri, configuration: configuration)
            try queue.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA journal_mode = DELETE") }
        } catch {
            throw ReadOnlyStore.reported(error, source: store, path: reader.path)
        }
        if case .inPlace = base { return (queue, registration, reader) }
        return (queue, registration, nil)
    }

    /// The store's page size, from its header (bytes 16-17, big-endian; 1 stands for 65536), checked: the blocks
    /// the overlay counts. An empty store gets SQLite's default, 4096.
    private static func pageSize(of source: any StoreSource, path: FilePath) throws -> Int {
        guard source.size > 0 else { return 4096 }
        var header = [UInt8](repeating: 0, count: 18)
        let read = try header.withUnsafeMutableBytes { try source.read(into: $0.baseAddress!, count: 18, at: 0) }
        let raw = read == 18 ? Int(header[16]) << 8 | Int(header[17]) : 0
        let size = raw == 1 ? 65_536 : raw
        guard size >= 512, size <= 65_536, size & (size - 1) == 0 else {
            throw DocumentError(.notSQLite, path: path, entry: BundleLayout.store,
                                reason: "the store's header names no valid page size (\(raw))")
        }
        return size
    }

    /// SQLite's file change counter of the store an overlay composes (header bytes 24-27).
    static func changeCounter(_ overlay: OverlayStore) throws -> UInt32 {
        let bytes = try overlay.bytes(at: 24, count: 4)
        guard bytes.count == 4 else {
            throw DocumentError(.storeCorrupt, path: overlay.folder, reason: "the working copy's header is cut short")
        }
        return bytes.reduce(0) { $0 << 8 | UInt32($1) }
    }

    /// Saves a document whose store an overlay composes (the writers held, `db` the connection): the bundle written
    /// from the composed store (FORMAT.md 16.2), a pending-base record appended before it is renamed into place,
    /// then the overlay reset onto it; the metadata written and how.
    func saveOverlay(_ overlay: OverlayStore, metadata: DocumentMetadata, _ db: Database)
    throws -> (DocumentMetadata, SaveReport) {
        let facts = try StoreInspector.facts(db, countingRows: false)
        let base = guarded.withLock { $0.overlayBase }
        let input = OverlaySaveInput(
            overlay: overlay, base: options.savesIncrementally ? base : nil,
            reason: options.savesIncrementally ? "the working copy's base bundle is unknown"
                : "incremental saves are off")
        let staged = try BundleWriter.stage(workingContent(store: overlay.overlayPath), metadata: metadata, to: path,
                                            replacingExisting: true, options: options.saving, storeFacts: facts,
                                            overlay: input)
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
            guard reader.openedIdentity == identity, case .inPlace(let plan) = StoreRoute(reader) else {
                options.logger.notice("\(path): the saved bundle is not served in place; the next save is full")
                return
            }
            let source = SegmentSource(reader, plan: plan, cacheSize: BundleStore.defaultCacheSize)
            try overlay.reset(newBase: source, identity: OverlayMap.BaseIdentity(reader.openedIdentity),
                              digest: reader.metadata.store.contentDigest)
            let replaced = guarded.withLock { state -> BundleReader? in
                defer { state.overlayBase = reader }
                return state.overlayBase
            }
            FileSystem.retire([], [replaced])
        } catch {
            options.logger.warning("\(path): the working copy could not be laid over the saved bundle: \(error)")
        }
    }

    /// Throws away the unsaved changes of a document whose store an overlay composes: the overlay is reset onto the
    /// bundle as it is now (emptied), and the bundle's other entries put back in the working copy. SQLite sees the
    /// bundle's store from its next read on (it compares the header's change counter, and drops its cache).
    func revertOverlay(_ overlay: OverlayStore, to reader: BundleReader, queue: DatabaseQueue) async throws {
        guard case .inPlace(let plan) = StoreRoute(reader) else {
            throw DocumentError(.ioFailure, path: path,
                                reason: "the bundle on disk can no longer be served in place; close the document and open it again")
        }
        let scratch = try FileSystem.makeTemporaryDirectory(in: workingCopy.directory, prefix: "revert-")
        defer { try? FileSystem.removeTree(scratch) }  // Squash cleanup error: the revert's outcome is what counts.
        let extracted = try reader.extract(into: scratch.appending("content"), permissions: [.ownerReadWrite],
                                           skippingStore: true)
        let source = SegmentSource(reader, plan: plan, cacheSize: BundleStore.defaultCacheSize)
        let isCurrent = try await queue.barrierWriteWithoutTransaction { db -> Bool in
            guard self.guarded.withLock({ $0.state != .closed }) else { throw self.closedError() }
            // > A save (an autosave) may have replaced the bundle since it was read: revert to the one there now.
            guard Self.identity(of: self.path) == reader.openedIdentity else { return false }
            try self.checkHeadersDiffer(overlay, source, newDigest: reader.metadata.store.contentDigest)
            try overlay.reset(newBase: source, identity: OverlayMap.BaseIdentity(reader.openedIdentity),
                              digest: reader.metadata.store.contentDigest)
            db.clearSchemaCache()
            _ = sqlite3_db_release_memory(db.sqliteConnection)
            try self.replaceFolders(from: extracted)
            let counter = try self.currentChangeCounter()
            self.guarded.withLock {
                $0.metadata = reader.metadata
                $0.overlayBase = reader
                $0.savedChangeCounter = counter
                $0.savedGeneration += 1
                if $0.state != .editingDisabled { $0.state = .normal }
            }
            try self.workingCopy.writeBase(WorkingCopy.Base(bundle: self.path.string,
                                                            storeDigest: reader.metadata.store.contentDigest))
            try db.inTransaction {
                try db.notifyChanges(in: .fullDatabase)
                return .commit
            }
            return true
        }
        guard isCurrent else { return try await revert() }
        publish(state)
    }

    /// Refuses to put under SQLite's connection a store of other content whose header it cannot tell from the one
    /// it sees now (change counter, page count, free list, schema cookie): it would keep its cached pages.
    private func checkHeadersDiffer(_ overlay: OverlayStore, _ source: any StoreSource, newDigest: String) throws {
        // > The same store as the base's: SQLite's cache holds its pages, or pages of a later change counter.
        guard newDigest != metadata.store.contentDigest else { return }
        let old = try overlay.bytes(at: 24, count: 20)
        var new = [UInt8](repeating: 0, count: 20)
        let count = try new.withUnsafeMutableBytes { try source.read(into: $0.baseAddress!, count: 20, at: 24) }
        if old.count == 20, count == 20, old == new {
            throw DocumentError(.ioFailure, path: path,
                                reason: "the bundle now holds another store whose SQLite header cannot be told from the open one's; close the document and open it again")
        }
    }
}
