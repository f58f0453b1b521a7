import Glibc

/// The segments of stores read in place that this process keeps in memory: one cache for every connection of the
/// process (the library's read-only and writable documents, `BundleStore`, the `mdzvfs` extension's connections),
/// keyed by the bundle file's identity, so that ten connections to one document inflate and check a segment once,
/// and two loads of the same segment at once are one load that the second waits for.
///
/// Two bounds hold at every moment:
/// - a bundle's segments take at most the largest cache size its open connections asked for (at least two of its
///   segments), as each connection's cache did before it was shared;
/// - all segments together take at most ``limit`` (32 MiB unless changed), or the largest bound of one bundle when
///   that is more (a connection that asked to cache a whole store gets it).
///
/// Past a bound, the least recently used segments go first. A bundle's segments go with its last connection.
///
/// A segment is shared only between connections that read the same bytes: the same file (device and inode), with
/// the same size and change times to the nanosecond (``FileIdentity``), cut by the same plan, and only when the
/// digest it was checked against is the one the asking connection's metadata records for it. A file whose times have
/// no nanoseconds (which proves nothing) gets a key of its own for each connection: it is not shared.
@_spi(Core) public final class SegmentPool: Sendable {
    /// The process's pool.
    @_spi(Core) public static let shared = SegmentPool(limit: defaultLimit)

    /// The bytes all bundles' segments may take together by default: 32 MiB.
    @_spi(Core) public static let defaultLimit = 32 << 20

    /// Identifies the bytes a plan cuts from one bundle file.
    @_spi(Core) public struct BundleKey: Hashable, Sendable {
        private let device: UInt64, inode: UInt64, size: Int64
        private let times: [Int]
        private let dataOffset: UInt64, interval: Int64, isWhole: Bool
        /// Nonzero for a file whose identity proves nothing: a key no other connection has.
        private let unique: UInt64

        /// The key of the store `plan` cuts from the file opened with `identity`.
        @_spi(Core) public init(_ identity: FileIdentity, plan: SegmentPlan) {
            device = identity.device
            inode = identity.inode
            size = identity.size
            times = [identity.modified.tv_sec, identity.modified.tv_nsec, identity.changed.tv_sec,
                     identity.changed.tv_nsec]
            dataOffset = plan.dataOffset
            interval = plan.interval
            isWhole = plan.isWhole
            unique = identity.hasFineTimes ? 0 : BundleKey.serial.withLock { $0 += 1; return $0 }
        }

        private static let serial = Protected<UInt64>(0)
    }

    /// A segment: its bundle, its index, and the digest it was checked against (a hit needs all three, so a
    /// connection gets only bytes checked against its own metadata, even if the file changed while it opened).
    private struct Key: Hashable {
        let bundle: BundleKey
        let index: Int
        let digest: String
    }

    private struct Entry {
        var bytes: [UInt8]
        var used: UInt64
    }

    /// One bundle's share: the cache sizes its connections asked for (size → connections), its bytes held.
    private struct Share {
        var asked: [Int: Int] = [:]
        var segmentBytes = 0
        var bytes = 0
        var peakBytes = 0
        /// The bytes this bundle's segments may take: the largest size asked for, at least two segments.
        var bound: Int { max(asked.keys.max() ?? 0, 2 * segmentBytes) }
    }

    /// The end of a segment's load, whether it was kept or failed.
    private typealias Load = WaitableState<Void?>

    private struct State {
        var entries: [Key: Entry] = [:]
        var loading: [Key: Load] = [:]
        var shares: [BundleKey: Share] = [:]
        var bytes = 0
        var peakBytes = 0
        var clock: UInt64 = 0
        var limit: Int
    }

    private let state: Protected<State>

    /// A pool whose segments take at most `limit` bytes together (or one bundle's bound, when that is more).
    @_spi(Core) public init(limit: Int) {
        state = Protected(State(limit: max(0, limit)))
    }

    /// The bytes all bundles' segments may take together (at least the largest bound of one bundle). Lowering it
    /// drops the least recently used segments at once.
    @_spi(Core) public var limit: Int {
        get { state.withLock { $0.limit } }
        set { state.withLock { $0.limit = max(0, newValue); Self.evict(&$0) } }
    }

    /// The bytes the pool holds now, and the most it held at once.
    @_spi(Core) public var bytes: (now: Int, peak: Int) { state.withLock { ($0.bytes, $0.peakBytes) } }

    /// The most bytes of `bundle`'s segments held at once while it had connections.
    @_spi(Core) public func peakBytes(of bundle: BundleKey) -> Int {
        state.withLock { $0.shares[bundle]?.peakBytes ?? 0 }
    }

    /// A connection to `bundle`, which cuts segments of up to `segmentBytes`, asking to keep `cacheSize` bytes.
    @_spi(Core) public func join(_ bundle: BundleKey, cacheSize: Int, segmentBytes: Int) {
        state.withLock { state in
            var share = state.shares[bundle] ?? Share()
            share.asked[max(0, cacheSize), default: 0] += 1
            share.segmentBytes = max(share.segmentBytes, segmentBytes)
            state.shares[bundle] = share
        }
    }

    /// That connection is gone: the bundle's bound may shrink, and its segments go with its last connection.
    @_spi(Core) public func leave(_ bundle: BundleKey, cacheSize: Int) {
        state.withLock { state in
            guard var share = state.shares[bundle] else { return }
            let size = max(0, cacheSize)
            share.asked[size, default: 1] -= 1
            if share.asked[size] == 0 { share.asked[size] = nil }
            if share.asked.isEmpty {
                state.shares[bundle] = nil
                for key in state.entries.keys where key.bundle == bundle { Self.drop(key, &state) }
                return
            }
            state.shares[bundle] = share
            Self.evict(&state, within: bundle)
        }
    }

    /// What a look-up finds.
    @_spi(Core) public enum Lookup {
        /// The segment, kept.
        case cached([UInt8])
        /// Another thread loads it: wait for it, then look again.
        case beingLoaded(WaitableState<Void?>)
        /// No one has it, and the caller now loads it: it then calls ``keep(_:as:of:digest:)`` or
        /// ``abandon(_:of:digest:)``.
        case toLoad
    }

    /// Segment `index` of `bundle`, checked against `digest`: kept (and marked used), being loaded, or now the
    /// caller's to load.
    @_spi(Core) public func look(_ index: Int, of bundle: BundleKey, digest: String) -> Lookup {
        let key = Key(bundle: bundle, index: index, digest: digest)
        return state.withLock { state in
            state.clock += 1
            if let entry = state.entries[key] {
                state.entries[key]?.used = state.clock
                return .cached(entry.bytes)
            }
            if let done = state.loading[key] { return .beingLoaded(done) }
            state.loading[key] = Load(nil)
            return .toLoad
        }
    }

    /// Whether segment `index` of `bundle`, checked against `digest`, is kept (it is not marked used).
    @_spi(Core) public func holds(_ index: Int, of bundle: BundleKey, digest: String) -> Bool {
        state.withLock { $0.entries[Key(bundle: bundle, index: index, digest: digest)] != nil }
    }

    /// Keeps a segment the caller loaded (after ``look(_:of:digest:)`` said `toLoad`), within both bounds, and ends
    /// its load. A segment of a bundle no connection holds any more is not kept.
    @_spi(Core) public func keep(_ bytes: [UInt8], as index: Int, of bundle: BundleKey, digest: String) {
        let key = Key(bundle: bundle, index: index, digest: digest)
        let done = state.withLock { state -> Load? in
            let done = state.loading.removeValue(forKey: key)
            guard state.shares[bundle] != nil else { return done }
            state.clock += 1
            state.bytes += bytes.count - (state.entries[key]?.bytes.count ?? 0)
            state.shares[bundle]?.bytes += bytes.count - (state.entries[key]?.bytes.count ?? 0)
            state.entries[key] = Entry(bytes: bytes, used: state.clock)
            Self.evict(&state, within: bundle)
            Self.evict(&state)
            if let share = state.shares[bundle] {
                state.shares[bundle]?.peakBytes = max(share.peakBytes, share.bytes)
            }
            state.peakBytes = max(state.peakBytes, state.bytes)
            return done
        }
        done?.set(())
    }

    /// Ends a load that failed: the next reader of the segment loads it again (and reports the failure).
    @_spi(Core) public func abandon(_ index: Int, of bundle: BundleKey, digest: String) {
        let done = state.withLock { $0.loading.removeValue(forKey: Key(bundle: bundle, index: index, digest: digest)) }
        done?.set(())
    }

    /// Drops `bundle`'s least recently used segments while they exceed its bound (one pass over the entries a
    /// segment dropped: at the default bounds a few dozen).
    private static func evict(_ state: inout State, within bundle: BundleKey) {
        while let share = state.shares[bundle], share.bytes > share.bound,
              let oldest = state.entries.lazy.filter({ $0.key.bundle == bundle }).min(by: { $0.value.used < $1.value.used }) {
            drop(oldest.key, &state)
        }
    }

    /// Drops the least recently used segments of any bundle while all of them exceed the pool's bound.
    private static func evict(_ state: inout State) {
        let bound = max(state.limit, state.shares.values.map(\.bound).max() ?? 0)
        while state.bytes > bound, let oldest = state.entries.min(by: { $0.value.used < $1.value.used }) {
            drop(oldest.key, &state)
        }
    }

    private static func drop(_ key: Key, _ state: inout State) {
        guard let entry = state.entries.removeValue(forKey: key) else { return }
        state.bytes -= entry.bytes.count
        state.shares[key.bundle]?.bytes -= entry.bytes.count
    }
}
