import SystemPackage

/// Where a store opened through ``BundleVFS`` reads its bytes: a bundle's store served segment by segment
/// (``SegmentSource``), or a store file (``StoreFile``, one extracted because its bundle cannot be served in place).
@_spi(Core) public protocol StoreSource: Sendable {
    /// The store's size in bytes.
    var size: Int64 { get }
    /// Copies `count` bytes at `offset` into `buffer`; returns how many there were (fewer at the store's end).
    func read(into buffer: UnsafeMutableRawPointer, count: Int, at offset: Int64) throws -> Int
    /// Records why a read failed, for the caller to report.
    func fail(_ error: DocumentError)
    /// The first failure recorded.
    var failure: DocumentError? { get }
    /// The bundle or file it reads, for errors.
    var origin: FilePath { get }
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

extension StoreSource {
    /// Checks, before SQLite reads a byte, what `verify` checks without SQLite (FORMAT.md 11.4): the store's header
    /// (its first segment, loaded and checked against its digest) is SQLite's, agrees with the metadata on the page
    /// size and `user_version`, and is not in WAL mode.
    ///
    /// - Throws: ``DocumentError/Code/notSQLite``, ``DocumentError/Code/metadataMismatch``,
    ///   ``DocumentError/Code/storeInWALMode``, naming `bundle`; or the segment's own error.
    @_spi(Core) public func checkHeader(against store: DocumentMetadata.Store, bundle: FilePath) throws {
        var head = [UInt8](repeating: 0, count: StoreHeader.length)
        let count = try head.withUnsafeMutableBytes { try read(into: $0.baseAddress!, count: $0.count, at: 0) }
        guard count == StoreHeader.length, let header = StoreHeader(head) else {
            throw DocumentError(.notSQLite, path: bundle, entry: BundleLayout.store,
                                reason: "is not a SQLite database (no SQLite header)")
        }
        if let (code, reason) = header.disagreement(with: store) {
            throw DocumentError(code, path: bundle, entry: BundleLayout.store, reason: reason)
        }
    }
}
