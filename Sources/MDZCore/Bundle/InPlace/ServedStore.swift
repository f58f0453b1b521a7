import SystemPackage

/// A store SQLite reads through ``BundleVFS``: a bundle's store served segment by segment (``InPlaceStore``), or a
/// store file (``StoreFileReader``, one extracted because its bundle cannot be served in place). It keeps why a read
/// failed, since SQLite only tells the app "disk I/O error".
@_spi(Core) public protocol ServedStore: StoreReader {
    /// Records why a read failed, for the caller to report.
    func fail(_ error: DocumentError)
    /// The first failure recorded.
    var failure: DocumentError? { get }
}

/// The first failure a source met, kept for the caller to report (SQLite only says "disk I/O error").
@_spi(Core) public final class FirstFailure: Sendable {
    @_spi(Core) public init() {}

    private let first = Protected<DocumentError?>(nil)

    /// Records `error` unless one is recorded already.
    @_spi(Core) public func record(_ error: DocumentError) { first.withLock { if $0 == nil { $0 = error } } }

    /// The failure recorded first, if any.
    @_spi(Core) public var error: DocumentError? { first.withLock { $0 } }
}

extension ServedStore {
    /// Checks, before SQLite reads a byte, what `verify` checks without SQLite (FORMAT.md 11.4): the store's header
    /// (its first segment, loaded and checked against its digest) is SQLite's, agrees with the metadata on the page
    /// size and `user_version`, and is not in WAL mode.
    ///
    /// - Throws: ``DocumentError/Code/notSQLite``, ``DocumentError/Code/metadataMismatch``,
    ///   ``DocumentError/Code/storeInWALMode``, naming `bundle`; or the segment's own error.
    @_spi(Core) public func checkHeader(against store: DocumentMetadata.Store, bundle: FilePath) throws {
        let header = try header(entry: BundleLayout.store, bundle: bundle)
        if let (code, reason) = header.disagreement(with: store) {
            throw DocumentError(code, path: bundle, entry: BundleLayout.store, reason: reason)
        }
    }
}
