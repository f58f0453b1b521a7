import Crypto

/// SHA-256 of a stream's bytes segment by segment: every `interval` bytes, the last segment holding what is left.
///
/// Fed in order, in chunks of any size; a chunk that crosses a segment's end is split there.
struct SegmentHasher {
    let interval: Int64
    private var hasher = SHA256()
    private var filled: Int64 = 0
    private var digests: [String] = []

    /// - Parameter interval: bytes per segment, more than 0.
    init(interval: Int64) {
        precondition(interval > 0, "a segment holds at least one byte")
        self.interval = interval
    }

    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        var rest = bytes
        while !rest.isEmpty {
            let take = Int(min(Int64(rest.count), interval - filled))
            hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: rest[..<take]))
            filled += Int64(take)
            rest = UnsafeRawBufferPointer(rebasing: rest[take...])
            if filled == interval {
                digests.append(hasher.finalize().hexString)
                hasher = SHA256()
                filled = 0
            }
        }
    }

    /// The digests of every segment, in order (the last, partial one included).
    mutating func finalize() -> [String] {
        if filled > 0 {
            digests.append(hasher.finalize().hexString)
            hasher = SHA256()
            filled = 0
        }
        return digests
    }
}
