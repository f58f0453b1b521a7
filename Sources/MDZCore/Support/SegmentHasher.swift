import Crypto

/// Cuts a stream fed in chunks of any size into segments of `interval` bytes (the last holding what is left): a
/// chunk that crosses a segment's end is split there.
@_spi(Core) public struct SegmentCutter: Sendable {
    @_spi(Core) public let interval: Int64
    @_spi(Core) public private(set) var filled: Int64 = 0

    /// - Parameter interval: bytes per segment, more than 0.
    @_spi(Core) public init(interval: Int64) {
        precondition(interval > 0, "a segment holds at least one byte")
        self.interval = interval
    }

    /// Hands each piece of `bytes` that lies inside one segment to `part`, in order, and calls `end` after the
    /// piece that completes a segment.
    @_spi(Core)
    public mutating func cut(_ bytes: UnsafeRawBufferPointer, part: (UnsafeRawBufferPointer) -> Void, end: () -> Void) {
        var rest = bytes
        while !rest.isEmpty {
            let take = Int(min(Int64(rest.count), interval - filled))
            part(UnsafeRawBufferPointer(rebasing: rest[..<take]))
            filled += Int64(take)
            rest = UnsafeRawBufferPointer(rebasing: rest[take...])
            if filled == interval {
                end()
                filled = 0
            }
        }
    }
}

/// SHA-256 of a stream's bytes segment by segment: every `interval` bytes, the last segment holding what is left.
@_spi(Core) public struct SegmentHasher {
    private var cutter: SegmentCutter
    private var hasher = SHA256()
    private var digests: [String] = []
    @_spi(Core) public var interval: Int64 { cutter.interval }

    /// - Parameter interval: bytes per segment, more than 0.
    @_spi(Core) public init(interval: Int64) { cutter = SegmentCutter(interval: interval) }

    @_spi(Core) public mutating func update(_ bytes: UnsafeRawBufferPointer) {
        cutter.cut(bytes, part: { hasher.update(bufferPointer: $0) }, end: {
            digests.append(hasher.finalize().hexString)
            hasher = SHA256()
        })
    }

    /// The digests of every complete segment so far.
    @_spi(Core) public var completed: [String] { digests }

    /// The digests of every segment, in order (the last, partial one included).
    @_spi(Core) public mutating func finalize() -> [String] {
        if cutter.filled > 0 {
            digests.append(hasher.finalize().hexString)
            hasher = SHA256()
            cutter = SegmentCutter(interval: cutter.interval)
        }
        return digests
    }
}
