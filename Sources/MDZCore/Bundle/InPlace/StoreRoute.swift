import SystemPackage

/// How a bundle's store is read read-only: in place, segment by segment from the bundle (FORMAT.md 11.4), or
/// extracted first, with the reason. Decided here alone: ``ReadOnlyConnection`` opens by it, and a read-only document's
/// revert reloads by it.
///
/// Reading in place holds whole segments in memory, so a bundle whose segments exceed the reader's
/// ``ReadingLimits/maxRestartSegmentSize`` or ``ReadingLimits/maxDigestSegmentSize`` (or 4 GiB, beyond the codecs'
/// 32-bit counts) is not served: the reason names the limit, and the caller extracts the store, which streams in
/// bounded buffers whatever the bundle declares.
@_spi(Core) public enum StoreRoute: Sendable {
    /// Served from the bundle, cut as the plan says.
    case inPlace(SegmentPlan)
    /// Extracted first, for this reason (said in the log, and by ``BundleStore/reason``).
    case extract(reason: String)

    /// The route for `reader`'s store; `inPlaceUnavailable`: why the caller's process can read no store in place
    /// (its SQLite opens no `file:` URI, or refused the VFS), `nil` when it can.
    @_spi(Core) public init(_ reader: BundleReader, inPlaceUnavailable: String? = nil) {
        if let reason = inPlaceUnavailable {
            self = .extract(reason: reason)
            return
        }
        guard let store = reader.entry(named: BundleLayout.store) else {
            self = .extract(reason: "the bundle has no store")
            return
        }
        switch Self.segmentedPlan(reader, store: store) {
        case .inPlace(let plan):
            self = .inPlace(plan)
        case .extract(let reason):
            // > The segment route is closed, but a small store is still served, whole.
            self = Self.wholePlan(reader, store: store).map { .inPlace($0) } ?? .extract(reason: reason)
        }
    }

    /// The plan that serves the store segment by segment, or why there is none.
    private static func segmentedPlan(_ reader: BundleReader, store: BundleEntry) -> StoreRoute {
        guard let segments = reader.metadata.store.segments else {
            return .extract(reason: "the bundle records no segment digests (an older or another writer)")
        }
        // > The reader checked the interval (at least 64 KiB) and the store's size (0 … 2⁶³ − 1) when it opened.
        let size = reader.metadata.store.size
        if let excess = excess(min(segments.interval, size), limit: reader.limits.maxDigestSegmentSize,
                               named: "maxDigestSegmentSize") {
            return .extract(reason: "its digest segments (\(bytes(segments.interval)) each, 'store.segments.interval') \(excess)")
        }
        guard store.isCompressed else {
            return .inPlace(SegmentPlan(store, size: size, interval: segments.interval,
                                        digests: DigestList(segments), restarts: nil, restartsPerSegment: 1,
                                        names: RecordNames(formatVersion: reader.metadata.formatVersion)))
        }
        guard case .used(_, true) = reader.restartIndex, let restarts = reader.metadata.store.deflateRestarts else {
            return .extract(reason: restartIndexProblem(reader.restartIndex))
        }
        guard restarts.interval > 0, segments.interval % restarts.interval == 0 else {
            return .extract(reason: "its segment digests (every \(segments.interval) bytes) are not cut at its restart points (every \(restarts.interval) bytes)")
        }
        if let excess = excess(min(restarts.interval, size), limit: reader.limits.maxRestartSegmentSize,
                               named: "maxRestartSegmentSize") {
            return .extract(reason: "its restart segments (\(bytes(restarts.interval)) each, 'store.deflateRestarts.interval') \(excess)")
        }
        return .inPlace(SegmentPlan(store, size: size, interval: segments.interval, digests: DigestList(segments),
                                    restarts: restarts,
                                    restartsPerSegment: Int(segments.interval / restarts.interval),
                                    names: RecordNames(formatVersion: reader.metadata.formatVersion)))
    }

    /// Why a deflated store's restart index does not serve reading in place, in one phrase.
    private static func restartIndexProblem(_ use: RestartIndexUse) -> String {
        switch use {
        case .absent: return "the deflated store has no restart index"
        case .stale(let reason): return "the deflated store's restart index is stale: \(reason)"
        case .used: return "the deflated store's restart index does not name its stream (an older writer's)"
        }
    }

    /// The plan that serves the store as one segment, when the segment route is closed (a store written under
    /// 1 MiB has no restart index; a repacked one's is stale; an older writer's has no segment digests) but the
    /// whole store is small enough to hold (``ReadingLimits/maxRestartSegmentSize``, and deflate's bound on its
    /// compressed size). It is then read and inflated once, at its first read, and checked against `store.sha256`
    /// (format version 1) or its segment digests (version 2): nothing is written to disk.
    private static func wholePlan(_ reader: BundleReader, store: BundleEntry) -> SegmentPlan? {
        let size = reader.metadata.store.size
        let limit = min(reader.limits.maxRestartSegmentSize, reader.limits.maxDigestSegmentSize, UInt64(UInt32.max))
        guard size >= 0, UInt64(size) <= limit,
              Int64(clamping: store.compressedSize) <= DeflateBounds.compressedBound(forSize: size) else { return nil }
        // > One segment, the whole store: one restart segment (the whole stream, ending with its final block) for a
        // > deflated store, checked against the store's SHA-256.
        let recorded = reader.metadata.store
        guard let check = recorded.sha256.map(SegmentPlan.WholeCheck.sha256) ?? recorded.segments.map(SegmentPlan.WholeCheck.segments)
        else { return nil }
        return SegmentPlan(store, size: size, interval: max(1, size), digests: DigestList(),
                           restarts: store.isCompressed ? DeflateRestarts(interval: max(1, size), offsets: [0]) : nil,
                           restartsPerSegment: 1, names: RecordNames(formatVersion: reader.metadata.formatVersion),
                           whole: check)
    }

    /// What is wrong with segments of `length` bytes (the declared interval, or the whole store when it is smaller)
    /// against a limit of ``ReadingLimits``, which can never admit more than 4 GiB − 1; `nil` when they fit.
    private static func excess(_ length: Int64, limit: UInt64, named name: String) -> String? {
        let bound = min(limit, UInt64(UInt32.max))
        guard UInt64(max(0, length)) > bound else { return nil }
        if bound < limit {
            return "are over 4 GiB, beyond what is ever read in place"
        }
        return "exceed the reader's limit on what reading in place holds in memory (ReadingLimits.\(name) = \(limit) bytes)"
    }

    private static func bytes(_ count: Int64) -> String {
        count >= 1 << 20 && count % (1 << 20) == 0 ? "\(count >> 20) MiB" : "\(count) bytes"
    }
}

/// How a store read in place is cut into the segments ``InPlaceStore`` serves, each checked against one digest:
/// made by ``StoreRoute`` from the bundle's metadata and the store entry, once its limits are checked.
@_spi(Core) public struct SegmentPlan: Sendable {
    /// The store's size in bytes.
    @_spi(Core) public let size: Int64
    /// Bytes in each segment but the last (the whole store, at least 1, when ``isWhole``).
    @_spi(Core) public let interval: Int64
    /// One SHA-256 (hex) a segment: `store.segments` (empty when ``isWhole``: ``whole`` says how it is checked).
    @_spi(Core) public let digests: DigestList
    /// Where the store entry's data starts in the bundle.
    @_spi(Core) public let dataOffset: UInt64
    /// The store entry's compressed size (below the file's size: the reader located it).
    @_spi(Core) public let compressedSize: UInt64
    /// The store entry's CRC-32 (the central directory's): what a store served whole is checked against too, so
    /// that it is what every zip tool reads from the entry.
    @_spi(Core) public let entryCRC: UInt32
    /// Where each restart segment starts in the compressed stream, for a deflated store (one segment, the whole
    /// stream, when ``isWhole``); `nil` for a stored one.
    @_spi(Core) public let restarts: DeflateRestarts?
    /// Restart segments in one digest's segment (1 for a stored store, and for a whole one).
    @_spi(Core) public let restartsPerSegment: Int
    /// How the store served as one segment is checked; `nil` when it is served segment by segment.
    @_spi(Core) public let whole: WholeCheck?
    /// Whether the store is served as one segment.
    @_spi(Core) public var isWhole: Bool { whole != nil }
    /// How errors name where the records are kept (the metadata's keys, or the store index).
    @_spi(Core) public let names: RecordNames

    /// How a store served whole is checked: by its SHA-256 (format version 1) or by each of its segment digests
    /// (version 2, FORMAT.md 13.1).
    @_spi(Core) public enum WholeCheck: Sendable {
        case sha256(String)
        case segments(DocumentMetadata.SegmentDigests)
    }

    @_spi(Core)
    public init(_ store: BundleEntry, size: Int64, interval: Int64, digests: DigestList, restarts: DeflateRestarts?,
         restartsPerSegment: Int, names: RecordNames, whole: WholeCheck? = nil) {
        self.size = size
        self.interval = interval
        self.digests = digests
        dataOffset = store.dataOffset
        compressedSize = store.compressedSize
        entryCRC = store.crc32
        self.restarts = restarts
        self.restartsPerSegment = restartsPerSegment
        self.whole = whole
        self.names = names
    }

    /// The bytes of one segment as they are held (a store smaller than its interval is one segment of its own
    /// size), at most the limits ``StoreRoute`` checked.
    @_spi(Core) public var segmentBytes: Int { Int(max(1, min(interval, size))) }

    /// What segment `index` is checked against, as text: its SHA-256, or for a store served whole, its SHA-256 or
    /// all its segment digests.
    @_spi(Core) public func expectedDigest(of index: Int) -> String {
        switch whole {
        case nil: return digests[index]
        case .sha256(let digest): return digest
        case .segments(let segments): return segments.sha256
        }
    }
}

/// One SHA-256 a segment, kept as one buffer of 32 bytes a digest: a store of 131,072 segments (16 GiB in format
/// version 3) makes no 131,072 strings when it opens; a digest is spelled out when its segment is loaded.
@_spi(Core) public struct DigestList: Sendable {
    /// 32 bytes a digest.
    private let bytes: [UInt8]

    /// The digests `segments` records (checked when the bundle opened), as it keeps them or parsed once.
    @_spi(Core) public init(_ segments: DocumentMetadata.SegmentDigests) { bytes = segments.rawDigests ?? [] }

    /// No digests.
    @_spi(Core) public init() { bytes = [] }

    @_spi(Core) public var count: Int { bytes.count / 32 }

    /// Segment `index`'s digest, as the metadata spells it.
    @_spi(Core) public subscript(index: Int) -> String {
        bytes[(index * 32)..<(index * 32 + 32)].hexString
    }
}
