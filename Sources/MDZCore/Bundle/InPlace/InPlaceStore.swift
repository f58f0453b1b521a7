import SystemPackage

/// A bundle's store served segment by segment from the bundle itself (FORMAT.md 11.4): segments loaded and checked
/// by a ``SegmentLoader``, kept and read ahead by a ``SegmentCache``.
@_spi(Core) public final class InPlaceStore: ServedStore {
    @_spi(Core) public let cache: SegmentCache
    private let firstFailure = FirstFailure()

    /// What the source keeps alive beside its loader (the process's shared record of the bundle, in the extension).
    private let owner: (any AnyObject & Sendable)?

    @_spi(Core) public init(_ reader: BundleReader, plan: SegmentPlan, cacheSize: Int) {
        cache = SegmentCache(SegmentLoader(reader: reader, plan: plan), cacheSize: cacheSize)
        owner = nil
    }

    /// A source reading through `loader` (shared with other connections to the same bundle), through the process's
    /// segment pool, which every connection to the same bundle file shares;
    /// `owner` is kept as long as the source.
    @_spi(Core) public init(_ loader: SegmentLoader, cacheSize: Int, owner: (any AnyObject & Sendable)?) {
        cache = SegmentCache(loader, cacheSize: cacheSize)
        self.owner = owner
    }

    @_spi(Core) public var size: Int64 { cache.loader.plan.size }
    @_spi(Core) public var origin: FilePath { cache.loader.path }

    @_spi(Core) public func read(into buffer: UnsafeMutableRawPointer, count: Int, at offset: Int64) throws -> Int {
        let interval = cache.loader.plan.interval
        var copied = 0
        while copied < count, offset + Int64(copied) < size {
            let position = offset + Int64(copied)
            let index = Int(position / interval)
            let segment = try cache.segment(index)
            let start = Int(position - Int64(index) * interval)
            let take = min(count - copied, segment.count - start)
            segment.withUnsafeBytes { bytes in
                guard let base = bytes.baseAddress else { return }
                (buffer + copied).copyMemory(from: base + start, byteCount: take)
            }
            copied += take
        }
        return copied
    }

    @_spi(Core) public func fail(_ error: DocumentError) { firstFailure.record(error) }

    @_spi(Core) public var failure: DocumentError? { firstFailure.error }
}
