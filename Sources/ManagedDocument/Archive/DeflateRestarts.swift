/// The points where a deflated entry's stream starts afresh: each segment of `interval` uncompressed bytes (the
/// last may be shorter) begins with a new deflate block at a byte boundary, without reaching back before it, and
/// every segment but the last ends at a block boundary on a byte boundary (a sync flush). A reader may inflate the
/// segments independently, on several cores; one that ignores this key inflates the stream as usual.
public struct DeflateRestarts: Codable, Sendable, Equatable {
    /// Uncompressed bytes per segment, at least 64 KiB.
    public var interval: Int64
    /// For each segment, the offset of its first byte from the start of the entry's compressed data; the first
    /// is 0, and they increase strictly.
    public var offsets: [Int64]
    /// The compressed size of the stream these offsets describe: with ``crc32``, what identifies that stream. A
    /// reader that finds the entry with another compressed size or CRC-32 (another tool repacked the bundle)
    /// ignores the index as stale. Older writers did not record it.
    public var compressedSize: Int64?
    /// The CRC-32 of the entry these offsets describe (see ``compressedSize``).
    public var crc32: UInt32?

    /// A restart index with these values.
    public init(interval: Int64, offsets: [Int64], compressedSize: Int64? = nil, crc32: UInt32? = nil) {
        self.interval = interval
        self.offsets = offsets
        self.compressedSize = compressedSize
        self.crc32 = crc32
    }
}

extension DeflateRestarts {
    /// Where restart segment `index`'s compressed bytes lie, counted from the start of the entry's data: from its
    /// offset to the next segment's, the last one's to the end of the stream (`streamSize` compressed bytes).
    ///
    /// Every reader and writer of restart segments takes the range from here (or from ``fileRange(ofSegment:dataOffset:compressedSize:)``).
    /// The bounds are as the index declares them: only ``ParallelInflater/check(_:size:compressedSize:)`` proves
    /// that `start < end <= streamSize`.
    func compressedBounds(ofSegment index: Int, streamSize: Int64) -> (start: Int64, end: Int64) {
        (offsets[index], index + 1 < offsets.count ? offsets[index + 1] : streamSize)
    }

    /// Where restart segment `index`'s compressed bytes lie in the bundle file, for an entry whose data starts at
    /// `dataOffset` and takes `compressedSize` bytes. The index must have passed
    /// ``ParallelInflater/check(_:size:compressedSize:)`` (the bundle's reader checks it when it opens).
    func fileRange(ofSegment index: Int, dataOffset: UInt64, compressedSize: UInt64) -> Range<Int64> {
        let (start, end) = compressedBounds(ofSegment: index, streamSize: Int64(compressedSize))
        return (Int64(dataOffset) + start)..<(Int64(dataOffset) + end)
    }
}
