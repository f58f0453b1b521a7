import Dispatch

/// The segments of a store read in place that are kept in memory: a bounded cache of the last segments used, and,
/// when reads go forward segment after segment (a scan), the next segments read, inflated and checked ahead on a
/// second thread (at most ``readAhead`` of them in flight besides the cache), so the scan's inflating and hashing
/// overlap SQLite's work.
///
/// The cache never holds more than `max(cacheSize, 2 × segment)` bytes, and a segment is at most
/// ``ReadingLimits/maxDigestSegmentSize`` (``StoreRoute``): besides it, at most ``readAhead`` + 1 segments are being
/// read at once.
@_spi(Core) public final class SegmentCache: Sendable {
    @_spi(Core) public let loader: SegmentLoader
    /// Segments kept at most.
    @_spi(Core) public let capacity: Int
    /// Segments read ahead at most, beyond the one asked for.
    @_spi(Core) public let readAhead: Int
    private let state = Protected(State())
    private let prefetcher = DispatchQueue(label: "ManagedDocument.readAhead", attributes: .concurrent)

    private struct State {
        @_spi(Core) public var cache: [Int: [UInt8]] = [:]
        @_spi(Core) public var recent: [Int] = []  // least recently used first
        /// Segments being loaded (by a read or ahead of one), each with the one-shot set when its load is over.
        @_spi(Core) public var loading: [Int: Load] = [:]
        /// The segment the last read asked for: the next one asked for makes the reads sequential.
        @_spi(Core) public var lastAsked = -2
        @_spi(Core) public var peakCachedBytes = 0
        @_spi(Core) public var segmentsLoaded = 0
    }

    /// - Parameter cacheSize: bytes of segments kept, at least two segments' worth (a whole store keeps two).
    @_spi(Core) public init(_ loader: SegmentLoader, cacheSize: Int) {
        self.loader = loader
        if loader.plan.isWhole {
            capacity = 2
            readAhead = 1
        } else {
            capacity = max(2, max(0, cacheSize) / loader.plan.segmentBytes)
            // > Up to three, and fewer than the cache holds: what is in flight never exceeds the cache's own size,
            // > so a store of 4 GiB and more (segments of 1 MiB and more) is still read ahead by more than one segment.
            readAhead = max(1, min(3, capacity - 1))
        }
    }

    /// The most bytes of segments the cache held at once, and the segments read from the bundle so far.
    @_spi(Core) public var statistics: (peakBytes: Int, segmentsLoaded: Int) {
        state.withLock { ($0.peakCachedBytes, $0.segmentsLoaded) }
    }

    /// The end of a segment's load, whether it was kept or failed.
    private typealias Load = WaitableState<Void?>

    /// What a read finds for a segment.
    private enum Lookup {
        case cached([UInt8])
        case beingLoaded(Load)
        case toLoad(Load)
    }

    /// Segment `index`: from the cache, from a load under way (waited for), or loaded here (outside the lock).
    @_spi(Core) public func segment(_ index: Int) throws -> [UInt8] {
        while true {
            let lookup = state.withLock { state -> Lookup in
                if let bytes = state.cache[index] {
                    if let position = state.recent.firstIndex(of: index) { state.recent.remove(at: position) }
                    state.recent.append(index)
                    return .cached(bytes)
                }
                if let done = state.loading[index] { return .beingLoaded(done) }
                let done = Load(nil)
                state.loading[index] = done
                return .toLoad(done)
            }
            switch lookup {
            case .cached(let bytes):
                readAhead(after: index)
                return bytes
            case .beingLoaded(let done):
                done.wait()
                continue  // cached now, or (a load that failed) loaded again here, which reports the failure
            case .toLoad(let done):
                defer { done.set(()) }
                let bytes: [UInt8]
                do {
                    bytes = try loader.load(index)
                } catch {
                    _ = state.withLock { $0.loading.removeValue(forKey: index) }
                    throw error
                }
                keep(bytes, as: index)
                readAhead(after: index)
                return bytes
            }
        }
    }

    /// Puts a loaded segment in the cache, evicting the least recently used one past the capacity.
    private func keep(_ bytes: [UInt8], as index: Int) {
        state.withLock { state in
            state.loading[index] = nil
            if state.cache.count >= capacity, let oldest = state.recent.first {
                state.recent.removeFirst()
                state.cache[oldest] = nil
            }
            state.cache[index] = bytes
            state.recent.append(index)
            state.segmentsLoaded += 1
            state.peakCachedBytes = max(state.peakCachedBytes, state.cache.values.reduce(0) { $0 + $1.count })
        }
    }

    /// After a read of segment `index` that followed one of `index - 1`, loads the next segments on the second
    /// thread (those neither cached nor being loaded). A segment that fails there is simply not cached: the read that
    /// needs it loads it again and reports the failure.
    private func readAhead(after index: Int) {
        let count = loader.plan.digests.count
        let ahead = state.withLock { state -> [(Int, Load)] in
            defer { state.lastAsked = index }
            guard index == state.lastAsked + 1 else { return [] }
            var ahead: [(Int, Load)] = []
            for next in (index + 1)...(index + readAhead) where next < count {
                guard state.cache[next] == nil, state.loading[next] == nil else { continue }
                let done = Load(nil)
                state.loading[next] = done
                ahead.append((next, done))
            }
            return ahead
        }
        for (next, done) in ahead {
            prefetcher.async { [self] in
                defer { done.set(()) }
                if let bytes = try? loader.load(next) {
                    keep(bytes, as: next)
                } else {
                    _ = state.withLock { $0.loading.removeValue(forKey: next) }
                }
            }
        }
    }
}
