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
    /// The CRC-32 of each restart segment's uncompressed bytes, 8 lowercase hexadecimal characters each,
    /// concatenated (format version 2, FORMAT.md 13.1: a writer combines the entry's CRC-32 from them for segments it
    /// copies unread; a reader checks each segment it inflates on its own). `nil` in a version 1 bundle.
    public var crc32s: String? = nil
    /// The CRC-32C (Castagnoli) of each restart segment's compressed bytes, 8 lowercase hexadecimal characters each,
    /// concatenated (format version 2, optional, FORMAT.md 13.1): what proves, at the cost of reading
    /// them, that the compressed bytes a save copies unread are still the ones written. `nil` when an earlier
    /// writer made the bundle; its next save then deflates the store whole, once.
    public var compressedCRC32Cs: String? = nil

    /// A restart index with these values.
    public init(interval: Int64, offsets: [Int64], compressedSize: Int64? = nil, crc32: UInt32? = nil,
                crc32s: String? = nil, compressedCRC32Cs: String? = nil) {
        self.interval = interval
        self.offsets = offsets
        self.compressedSize = compressedSize
        self.crc32 = crc32
        self.crc32s = crc32s
        self.compressedCRC32Cs = compressedCRC32Cs
    }
}

extension DeflateRestarts {
    /// ``crc32s`` spelled from one CRC-32 per restart segment.
    @_spi(Core) public static func spelled(_ crcs: [UInt32]) -> String {
        var text = [UInt8]()
        text.reserveCapacity(crcs.count * 8)
        let digits = Array("0123456789abcdef".utf8)
        for crc in crcs {
            for shift in stride(from: 28, through: 0, by: -4) { text.append(digits[Int(crc >> UInt32(shift) & 0xF)]) }
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// The recorded CRC-32 of restart segment `index`; `nil` when ``crc32s`` is absent or does not hold it as 8
    /// lowercase hexadecimal characters (a reader checks the whole string when the bundle opens).
    @_spi(Core) public func recordedCRC(ofSegment index: Int) -> UInt32? {
        Self.value(in: crc32s, at: index)
    }

    /// The recorded CRC-32C of restart segment `index`'s compressed bytes; `nil` when ``compressedCRC32Cs`` is absent
    /// or does not hold it as 8 lowercase hexadecimal characters.
    @_spi(Core) public func recordedCompressedCRC(ofSegment index: Int) -> UInt32? {
        Self.value(in: compressedCRC32Cs, at: index)
    }

    /// The `index`th value of 8 lowercase hexadecimal characters in `list`; `nil` when there is none.
    private static func value(in list: String?, at index: Int) -> UInt32? {
        guard let list, index >= 0 else { return nil }
        let text = list.utf8
        let (start, overflow) = index.multipliedReportingOverflow(by: 8)
        guard !overflow, start <= text.count - 8 else { return nil }
        func parse<C: Collection<UInt8>>(_ digits: C) -> UInt32? {
            var value: UInt32 = 0
            for character in digits {
                guard let nibble = Hex.nibble(character) else { return nil }
                value = value << 4 | UInt32(nibble)
            }
            return value
        }
        // > A native string's bytes at once (one per segment is looked up when a bundle of 131,072 opens); any
        // > other string walked.
        if let parsed = text.withContiguousStorageIfAvailable({ parse($0[start..<(start + 8)]) }) { return parsed }
        return parse(text.dropFirst(start).prefix(8))
    }

    /// Why ``crc32s`` does not hold one CRC-32 per offset in lowercase hexadecimal; `nil` when it does.
    @_spi(Core) public var crc32sProblem: String? {
        guard let crc32s else { return "'crc32s' is missing (format version 2 requires it with the restart index)" }
        return problem(of: crc32s, named: "crc32s")
    }

    /// Why ``compressedCRC32Cs``, when present, does not hold one CRC-32C per offset in lowercase hexadecimal; `nil`
    /// when it does, or is absent (an earlier writer's bundle).
    @_spi(Core) public var compressedCRC32CsProblem: String? {
        compressedCRC32Cs.flatMap { problem(of: $0, named: "compressedCRC32Cs") }
    }

    /// Why `list` does not hold one 8-character lowercase hexadecimal value per offset; `nil` when it does.
    private func problem(of list: String, named name: String) -> String? {
        let count = list.utf8.count
        guard count % 8 == 0, count / 8 == offsets.count else {
            return "'\(name)' holds \(count) characters where \(offsets.count) segments need \(offsets.count * 8)"
        }
        if let position = list.utf8.firstIndex(where: { Hex.nibble($0) == nil })
            .map({ list.utf8.distance(from: list.utf8.startIndex, to: $0) }) {
            return "'\(name)' is not lowercase hexadecimal at character \(position) (segment \(position / 8))"
        }
        return nil
    }
}

extension DeflateRestarts {
    /// Where restart segment `index`'s compressed bytes lie, counted from the start of the entry's data: from its
    /// offset to the next segment's, the last one's to the end of the stream (`streamSize` compressed bytes).
    ///
    /// Every reader and writer of restart segments takes the range from here (or from ``fileRange(ofSegment:dataOffset:compressedSize:)``).
    /// The bounds are as the index declares them: only ``ParallelInflater/check(_:size:compressedSize:)`` proves
    /// that `start < end <= streamSize`.
    @_spi(Core) public func compressedBounds(ofSegment index: Int, streamSize: Int64) -> (start: Int64, end: Int64) {
        (offsets[index], index + 1 < offsets.count ? offsets[index + 1] : streamSize)
    }

    /// Where restart segment `index`'s compressed bytes lie in the bundle file, for an entry whose data starts at
    /// `dataOffset` and takes `compressedSize` bytes. The index must have passed
    /// ``ParallelInflater/check(_:size:compressedSize:)`` (the bundle's reader checks it when it opens).
    @_spi(Core)
    public func fileRange(ofSegment index: Int, dataOffset: UInt64, compressedSize: UInt64) -> Range<Int64> {
        let (start, end) = compressedBounds(ofSegment: index, streamSize: Int64(compressedSize))
        return (Int64(dataOffset) + start)..<(Int64(dataOffset) + end)
    }
}
