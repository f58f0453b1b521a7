import GRDB
import Logging
import SystemPackage
@_spi(Core) import MDZCore

/// A read-only connection to a bundle's store, made by ``open(_:cacheSize:isImmutable:label:logger:extract:)``: the
/// one factory behind ``BundleStore`` and a read-only ``Document``. It reads the store in place or extracts it as
/// ``StoreRoute`` decides, and says which in the log.
///
/// Read in place, the connection reads a ``StoreSlot`` through ``BundleVFS``, and ``registration`` keeps that slot
/// registered: keep it as long as the connection (dropping it unregisters the slot; nothing else does).
struct ReadOnlyConnection: Sendable {
    let queue: DatabaseQueue
    /// The registration of the slot the connection reads, for a store read in place; `nil` when it was extracted.
    let registration: StoreSlot.Registration?
    /// Why the store was extracted; `nil` when it is read in place.
    let extractionReason: String?

    /// Opens `reader`'s store read-only, in place when ``StoreRoute`` allows it.
    ///
    /// - Parameters:
    ///   - cacheSize: bytes of segments kept in memory (``SegmentCache``).
    ///   - isImmutable: whether the store is never replaced under the connection (``StoreSlot``).
    ///   - label: the connection's label.
    ///   - extract: extracts the store where the caller keeps it and opens it read-only, when the route says so.
    /// - Throws: for a store read in place, the failure of the segment SQLite read first (``reported(_:source:path:)``);
    ///   otherwise `extract`'s errors.
    static func open(_ reader: BundleReader, cacheSize: Int, isImmutable: Bool, label: String, logger: Logger,
                     extract: () throws -> DatabaseQueue) throws -> ReadOnlyConnection {
        switch StoreRoute(reader, inPlaceUnavailable: StoreRoute.inPlaceUnavailable) {
        case .inPlace(let plan):
            let source = InPlaceStore(reader, plan: plan, cacheSize: cacheSize)
            try source.checkHeader(against: reader.metadata.store, bundle: reader.path)
            let registration = StoreSlot.Registration(StoreSlot(source, isImmutable: isImmutable))
            var configuration = Configuration()
            configuration.readonly = true
            configuration.label = label
            let queue: DatabaseQueue
            do {
                queue = try DatabaseQueue(path: registration.uri, configuration: configuration)
            } catch {
                throw reported(error, source: source, path: reader.path)  // a damaged segment, named
            }
            logInPlace(reader.path, logger: logger)
            return ReadOnlyConnection(queue: queue, registration: registration, extractionReason: nil)
        case .extract(let reason):
            let queue = try extract()
            logExtracted(reader.path, reason: reason, logger: logger)
            return ReadOnlyConnection(queue: queue, registration: nil, extractionReason: reason)
        }
    }

    /// What a replaceable slot serves from now on: `reader`'s store, in place when ``StoreRoute`` allows it, or the
    /// store file `extract` returns (extracted where the caller keeps it).
    static func source(_ reader: BundleReader, cacheSize: Int, logger: Logger,
                       extract: () throws -> FilePath) throws -> any ServedStore {
        switch StoreRoute(reader, inPlaceUnavailable: StoreRoute.inPlaceUnavailable) {
        case .inPlace(let plan):
            let source = InPlaceStore(reader, plan: plan, cacheSize: cacheSize)
            try source.checkHeader(against: reader.metadata.store, bundle: reader.path)
            logInPlace(reader.path, logger: logger)
            return source
        case .extract(let reason):
            let file = try StoreFileReader(extract())
            logExtracted(reader.path, reason: reason, logger: logger)
            return file
        }
    }

    private static func logInPlace(_ bundle: FilePath, logger: Logger) {
        logger.debug("\(bundle): the store is read from the bundle, segment by segment")
    }

    private static func logExtracted(_ bundle: FilePath, reason: String, logger: Logger) {
        logger.notice("\(bundle): the store was extracted to be read, because \(reason)")
    }

    /// A failed read's own error (a damaged segment, recorded by its source) in place of SQLite's "disk I/O error";
    /// SQLite's I/O and corruption errors otherwise name the store as damaged.
    static func reported(_ error: any Error, source: (any ServedStore)?, path: FilePath) -> any Error {
        if let failure = source?.failure { return failure }
        if let error = error as? DatabaseError, error.resultCode == .SQLITE_IOERR || error.resultCode == .SQLITE_CORRUPT {
            return DocumentError(.storeCorrupt, path: path, entry: BundleLayout.store,
                                 reason: "SQLite cannot read the store", underlyingError: error)
        }
        return error
    }
}
