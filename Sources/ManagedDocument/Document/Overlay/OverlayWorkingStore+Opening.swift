import GRDB
import SystemPackage
@_spi(Core) import MDZCore

extension OverlayWorkingStore {
    /// What an overlay lies over: the bundle's store served in place, or (when the reader's limits do not let it be
    /// served in place, and a crashed overlay is recovered) a verified copy of it extracted into the working copy.
    enum Base {
        case inPlace(SegmentPlan)
        case extracted
    }

    /// The name of the extracted base an overlay recovered under limits that do not serve the bundle in place
    /// lies over, in the working copy's folder.
    static let extractedBaseName = "base-store"

    /// Opens the store of a writable document through an overlay in the working copy's folder over `reader`'s
    /// bundle, served as `base` says: made empty (the bundle's other entries extracted beside it), or recovered as
    /// the last acknowledged commit left it (SQLite rolls a hot journal back). Returns the connection and the
    /// working store (whose saves copy unchanged segments from `reader`'s bundle, unless over an extracted base).
    static func open(_ copy: WorkingCopy, reader: BundleReader, base: Base, recovering: Bool,
                     options: Document.OpenOptions) throws -> (queue: DatabaseQueue, store: OverlayWorkingStore) {
        OverlayStore.removeLeftovers(in: copy.directory)
        let source: any ServedStore
        switch base {
        case .inPlace(let plan):
            source = InPlaceStore(reader, plan: plan, cacheSize: BundleStore.defaultCacheSize)
        case .extracted:
            let file = copy.directory.appending(extractedBaseName)
            if try FileSystem.exists(file) { try FileSystem.removeFile(file) }
            _ = try reader.extractStore(to: file)
            source = try StoreFileReader(file)
        }
        let identity = OverlayMap.BaseIdentity(reader.openedIdentity)
        let digest = reader.metadata.store.contentDigest
        let overlay: OverlayStore
        if recovering {
            overlay = try OverlayStore.open(folder: copy.directory, base: source, expectedDigest: digest)
        } else {
            _ = try reader.extract(into: copy.content, permissions: [.ownerReadWrite], skippingStore: true)
            try copy.writeBase(WorkingCopy.Base(bundle: reader.path.string, storeDigest: digest))
            overlay = try OverlayStore.create(folder: copy.directory, base: source,
                                              pageSize: try pageSize(of: source, path: reader.path),
                                              baseIdentity: identity, baseDigest: digest)
        }
        let registration = try OverlayStore.Registration(overlay)
        var configuration = Configuration()
        configuration.label = "ManagedDocument.document"
        let queue: DatabaseQueue
        do {
            queue = try DatabaseQueue(path: registration.uri, configuration: configuration)
            try queue.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA journal_mode = DELETE") }
        } catch {
            throw ReadOnlyConnection.reported(error, source: overlay, path: reader.path)
        }
        var servedBase: BundleReader?
        if case .inPlace = base { servedBase = reader }
        return (queue, OverlayWorkingStore(path: reader.path, workingCopy: copy, options: options,
                                           registration: registration, base: servedBase))
    }

    /// The store's page size, from its header (``StoreHeader/pageSize``): the blocks the overlay counts. An empty
    /// store gets SQLite's default, 4096.
    private static func pageSize(of source: any ServedStore, path: FilePath) throws -> Int {
        guard source.size > 0 else { return 4096 }
        var header = [UInt8](repeating: 0, count: 18)
        let read = try header.withUnsafeMutableBytes { try source.read(into: $0.baseAddress!, count: 18, at: 0) }
        let bytes = Array(header.prefix(read))
        guard let size = StoreHeader.pageSize(bytes) else {
            throw DocumentError(.notSQLite, path: path, entry: BundleLayout.store,
                                reason: "the store's header names no valid page size (\(StoreHeader.rawPageSize(bytes) ?? 0))")
        }
        return size
    }
}
