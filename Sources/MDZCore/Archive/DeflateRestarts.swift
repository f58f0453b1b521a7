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
    ///
    /// Values a reader took from a version 3 store index are kept as numbers and spelled here on each use.
    public var crc32s: String? {
        get { crcs.spelling }
        set { crcs = RecordedValues(newValue) }
    }
    /// The CRC-32C (Castagnoli) of each restart segment's compressed bytes, 8 lowercase hexadecimal characters each,
    /// concatenated (format version 2, optional, FORMAT.md 13.1): what proves, at the cost of reading
    /// them, that the compressed bytes a save copies unread are still the ones written. `nil` when an earlier
    /// writer made the bundle; its next save then deflates the store whole, once.
    public var compressedCRC32Cs: String? {
        get { compressedCRCs.spelling }
        set { compressedCRCs = RecordedValues(newValue) }
    }
    private var crcs = RecordedValues(nil)
    private var compressedCRCs = RecordedValues(nil)

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

    /// A restart index whose CRC-32s and CRC-32Cs are numbers, one a segment, as a version 3 store index holds them.
    @_spi(Core) public init(interval: Int64, offsets: [Int64], compressedSize: Int64?, crc32: UInt32?,
                            crc32Values: [UInt32], compressedCRC32CValues: [UInt32]) {
        self.init(interval: interval, offsets: offsets, compressedSize: compressedSize, crc32: crc32)
        (crcs, compressedCRCs) = (RecordedValues(crc32Values), RecordedValues(compressedCRC32CValues))
    }

    private enum CodingKeys: String, CodingKey { case interval, offsets, compressedSize, crc32, crc32s, compressedCRC32Cs }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(interval: try container.decode(Int64.self, forKey: .interval),
                  offsets: try container.decode([Int64].self, forKey: .offsets),
                  compressedSize: try container.decodeIfPresent(Int64.self, forKey: .compressedSize),
                  crc32: try container.decodeIfPresent(UInt32.self, forKey: .crc32),
                  crc32s: try container.decodeIfPresent(String.self, forKey: .crc32s),
                  compressedCRC32Cs: try container.decodeIfPresent(String.self, forKey: .compressedCRC32Cs))
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(interval, forKey: .interval)
        try container.encode(offsets, forKey: .offsets)
        try container.encodeIfPresent(compressedSize, forKey: .compressedSize)
        try container.encodeIfPresent(crc32, forKey: .crc32)
        try container.encodeIfPresent(crc32s, forKey: .crc32s)
        try container.encodeIfPresent(compressedCRC32Cs, forKey: .compressedCRC32Cs)
    }

    /// Equal values, however each side keeps its CRC-32s.
    public static func == (a: DeflateRestarts, b: DeflateRestarts) -> Bool {
        a.interval == b.interval && a.offsets == b.offsets && a.compressedSize == b.compressedSize && a.crc32 == b.crc32
            && a.crcs == b.crcs && a.compressedCRCs == b.compressedCRCs
    }
}

/// One 32-bit value a restart segment, as the metadata spells them (8 lowercase hexadecimal characters each,
/// concatenated) or as numbers (a version 3 store index's); absent in bundles that record none.
private enum RecordedValues: Sendable {
    case absent
    case spelled(String)
    case values([UInt32])

    init(_ spelling: String?) { self = spelling.map { .spelled($0) } ?? .absent }
    init(_ values: [UInt32]) { self = .values(values) }

    var spelling: String? {
        switch self {
        case .absent: return nil
        case .spelled(let text): return text
        case .values(let values): return DeflateRestarts.spelled(values)
        }
    }

    /// The `index`th value; `nil` when there is none or its spelling is not 8 lowercase hexadecimal characters.
    func value(at index: Int) -> UInt32? {
        switch self {
        case .absent: return nil
        case .spelled(let text): return DeflateRestarts.value(in: text, at: index)
        case .values(let values): return values.indices.contains(index) ? values[index] : nil
        }
    }

    var isAbsent: Bool {
        if case .absent = self { return true }
        return false
    }

    /// How many values it holds, when they are numbers.
    var valueCount: Int? {
        if case .values(let values) = self { return values.count }
        return nil
    }

    static func == (a: RecordedValues, b: RecordedValues) -> Bool {
        switch (a, b) {
        case (.absent, .absent): return true
        case (.values(let left), .values(let right)): return left == right
        case (.absent, _), (_, .absent): return false
        default: return a.spelling == b.spelling
        }
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
        crcs.value(at: index)
    }

    /// The recorded CRC-32C of restart segment `index`'s compressed bytes; `nil` when ``compressedCRC32Cs`` is absent
    /// or does not hold it as 8 lowercase hexadecimal characters.
    @_spi(Core) public func recordedCompressedCRC(ofSegment index: Int) -> UInt32? {
        compressedCRCs.value(at: index)
    }

    /// Whether CRC-32s of the restart segments are recorded (``crc32s``), spelled or as numbers.
    @_spi(Core) public var recordsCRC32s: Bool { !crcs.isAbsent }
    /// Whether CRC-32Cs of the restart segments' compressed bytes are recorded (``compressedCRC32Cs``).
    @_spi(Core) public var recordsCompressedCRC32Cs: Bool { !compressedCRCs.isAbsent }

    /// The `index`th value of 8 lowercase hexadecimal characters in `list`; `nil` when there is none.
    fileprivate static func value(in list: String?, at index: Int) -> UInt32? {
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
        if let count = crcs.valueCount { return valueCountProblem(count, named: "crc32s") }
        guard let crc32s else { return "'crc32s' is missing (format version 2 requires it with the restart index)" }
        return problem(of: crc32s, named: "crc32s")
    }

    /// Why ``compressedCRC32Cs``, when present, does not hold one CRC-32C per offset in lowercase hexadecimal; `nil`
    /// when it does, or is absent (an earlier writer's bundle).
    @_spi(Core) public var compressedCRC32CsProblem: String? {
        if let count = compressedCRCs.valueCount { return valueCountProblem(count, named: "compressedCRC32Cs") }
        return compressedCRC32Cs.flatMap { problem(of: $0, named: "compressedCRC32Cs") }
    }

    /// Why `count` values are not one per offset; `nil` when they are.
    private func valueCountProblem(_ count: Int, named name: String) -> String? {
        count == offsets.count ? nil : "'\(name)' holds \(count) values where there are \(offsets.count) segments"
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
