
/// The file SQLite opened through ``BundleVFS``: the source it reads now, which a read-only document replaces when it
/// reverts (the same connection then reads the bundle as it is now).
///
/// An immutable slot (``BundleStore``: one bundle, never replaced) is opened with `immutable=1`: SQLite takes no
/// locks and never looks at the file again. A replaceable one is opened read-only without it: at the start of every
/// read transaction SQLite reads the header's change counter and drops its page cache when it differs, as it does
/// for a file another process changed.
///
/// A write is refused at the file's lock: SQLite asks for a lock above `SHARED` only to write, and then gets
/// `SQLITE_READONLY` ("attempt to write a readonly database"); `refusingWrites` is told first (the extension logs how
/// to edit a document there, so the notice comes only when something writes).
@_spi(Core) public final class StoreSlot: Sendable {
    @_spi(Core) public let isImmutable: Bool
    @_spi(Core) public let refusingWrites: (@Sendable () -> Void)?
    private let current: Protected<any ServedStore>

    @_spi(Core)
    public init(_ source: any ServedStore, isImmutable: Bool, refusingWrites: (@Sendable () -> Void)? = nil) {
        self.isImmutable = isImmutable
        self.refusingWrites = refusingWrites
        current = Protected(source)
    }

    @_spi(Core) public var source: any ServedStore { current.withLock { $0 } }

    /// Serves `source` from now on (only for a replaceable slot).
    @_spi(Core) public func replace(with source: any ServedStore) {
        precondition(!isImmutable, "an immutable store is never replaced")
        current.withLock { $0 = source }
    }
}
