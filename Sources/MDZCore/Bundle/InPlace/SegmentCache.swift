import Dispatch

/// One connection's view of the segments of a store read in place: segments come from the process's
/// ``SegmentPool`` (loaded here when no connection has them, and kept there for every connection to the same bundle
/// file), and, when this connection's reads go forward segment after segment (a scan), the next segments are read,
/// inflated and checked ahead on another thread (at most ``readAhead`` of them in flight), so the scan's inflating
/// and hashing overlap SQLite's work.
///
/// The pool keeps at most `max(cacheSize, 2 × segment)` bytes of this bundle's segments (the largest size its
/// connections asked for), and a segment is at most ``ReadingLimits/maxDigestSegmentSize`` (``StoreRoute``): besides
/// them, at most ``readAhead`` + 1 segments are being read for this connection at once.
@_spi(Core) public final class SegmentCache: Sendable {
    @_spi(Core) public let loader: SegmentLoader
    /// Segments this connection's share of the pool holds at most.
    @_spi(Core) public let capacity: Int
    /// Segments read ahead at most, beyond the one asked for.
    @_spi(Core) public let readAhead: Int
    private let pool: SegmentPool
    private let cacheSize: Int
    private let state = Protected(State())
    private static let prefetcher = DispatchQueue(label: "ManagedDocument.readAhead", attributes: .concurrent)

    private struct State {
        /// The segment the last read asked for: the next one asked for makes the reads sequential.
        var lastAsked = -2
        var segmentsLoaded = 0
    }

    /// - Parameters:
    ///   - cacheSize: bytes of this bundle's segments the pool keeps for it, at least two segments' worth (a whole
    ///     store keeps two).
    ///   - pool: the pool the segments are kept in (the process's).
    @_spi(Core) public init(_ loader: SegmentLoader, cacheSize: Int, pool: SegmentPool = .shared) {
        self.loader = loader
        self.pool = pool
        if loader.plan.isWhole {
            capacity = 2
            readAhead = 1
            self.cacheSize = 0
        } else {
            capacity = max(2, max(0, cacheSize) / loader.plan.segmentBytes)
            // > Up to three, and fewer than the cache holds: what is in flight never exceeds the cache's own size,
            // > so a store of 4 GiB and more (segments of 1 MiB and more) is still read ahead by more than one segment.
            readAhead = max(1, min(3, capacity - 1))
            self.cacheSize = max(0, cacheSize)
        }
        pool.join(loader.key, cacheSize: self.cacheSize, segmentBytes: loader.plan.segmentBytes)
    }

    deinit { pool.leave(loader.key, cacheSize: cacheSize) }

    /// The most bytes of this bundle's segments the pool held at once, and the segments this connection read from
    /// the bundle so far (those another connection had read are not counted).
    @_spi(Core) public var statistics: (peakBytes: Int, segmentsLoaded: Int) {
        (pool.peakBytes(of: loader.key), state.withLock { $0.segmentsLoaded })
    }

    /// Segment `index`: from the pool, from a load under way (waited for), or loaded here and kept in the pool.
    @_spi(Core) public func segment(_ index: Int) throws -> [UInt8] {
        let digest = loader.plan.expectedDigest(of: index)
        while true {
            switch pool.look(index, of: loader.key, digest: digest) {
            case .cached(let bytes):
                readAhead(after: index)
                return bytes
            case .beingLoaded(let done):
                done.wait()
                continue  // kept now, or (a load that failed) loaded again here, which reports the failure
            case .toLoad:
                let bytes: [UInt8]
                do {
                    bytes = try loader.load(index)
                } catch {
                    pool.abandon(index, of: loader.key, digest: digest)
                    throw error
                }
                state.withLock { $0.segmentsLoaded += 1 }
                pool.keep(bytes, as: index, of: loader.key, digest: digest)
                readAhead(after: index)
                return bytes
            }
        }
    }

    /// After a read of segment `index` that followed one of `index - 1`, loads the next segments on another thread
    /// (those no connection has kept or is loading). A segment that fails there is simply not kept: the read that
    /// needs it loads it again and reports the failure.
    private func readAhead(after index: Int) {
        let count = loader.plan.digests.count
        let sequential = state.withLock { state -> Bool in
            defer { state.lastAsked = index }
            return index == state.lastAsked + 1
        }
        guard sequential else { return }
        for next in (index + 1)...(index + readAhead) where next < count {
            let digest = loader.plan.expectedDigest(of: next)
            guard case .toLoad = pool.look(next, of: loader.key, digest: digest) else { continue }
            // > Not `self`: a connection that closes meanwhile goes at once, and what its load brings back is
            // > not kept if it was the bundle's last.
            Self.prefetcher.async { [loader, pool, state] in
                if let bytes = try? loader.load(next) {
                    state.withLock { $0.segmentsLoaded += 1 }
                    pool.keep(bytes, as: next, of: loader.key, digest: digest)
                } else {
                    pool.abandon(next, of: loader.key, digest: digest)
                }
            }
        }
    }
}
