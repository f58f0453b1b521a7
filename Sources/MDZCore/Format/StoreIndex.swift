import Crypto

/// The store index of format version 3 (FORMAT.md 13.2): the entry `StoreContent/persistentStore.index`, which holds
/// one record per segment of the store (its SHA-256, and for a deflated store its restart offset, CRC-32 and
/// compressed CRC-32C) and a hash tree over the records, so that the metadata carries only the tree's root
/// (`store.index.root`) whatever the store's size, and a reader can check any record by the tree blocks on its path.
///
/// Layout, little-endian: a 64-byte header, the records (48 bytes each), then the tree's hash blocks, level 0 first.
/// The records are cut into 4,096-byte blocks (the last padded with zeros when hashed); level 0 is the SHA-256 of
/// each, and each level above is the SHA-256 of each 4,096-byte block of the level below's hashes (the last padded
/// with zeros), until a level holds one hash: the top hash, which is not stored. Every level below it is stored,
/// padded with zeros to whole blocks. The root is the SHA-256 of the header followed by the top hash.
@_spi(Core) public enum StoreIndex {
    /// The first 8 bytes of the entry.
    @_spi(Core) public static let magic = Array("MDZINDEX".utf8)
    @_spi(Core) public static let headerSize = 64
    @_spi(Core) public static let recordSize = 48
    @_spi(Core) public static let blockSize = 4_096
    /// Header flag: the records carry the restart offsets, CRC-32s and CRC-32Cs of a deflated store.
    @_spi(Core) public static let hasRestartsFlag: UInt32 = 1

    /// What the header records: the store's size, its segment interval (also its restart interval when
    /// ``hasRestarts``), and whether the records carry restart points.
    @_spi(Core) public struct Layout: Sendable, Equatable {
        @_spi(Core) public var size: Int64
        @_spi(Core) public var interval: Int64
        @_spi(Core) public var hasRestarts: Bool

        @_spi(Core) public init(size: Int64, interval: Int64, hasRestarts: Bool) {
            self.size = size
            self.interval = interval
            self.hasRestarts = hasRestarts
        }

        /// ⌈size ÷ interval⌉, or `nil` for a size or interval out of range (both come from a bundle).
        @_spi(Core) public var count: Int? {
            DocumentMetadata.SegmentDigests.count(forSize: size, interval: interval).flatMap { Int(exactly: $0) }
        }
    }

    /// The records of a store, as a writer has them: one SHA-256 (32 raw bytes) per segment, and for a deflated store
    /// with restart points one offset, CRC-32 and CRC-32C per segment.
    @_spi(Core) public struct Records: Sendable {
        @_spi(Core) public var digests: [UInt8]
        @_spi(Core) public var restarts: (offsets: [Int64], crc32s: [UInt32], compressedCRC32Cs: [UInt32])?

        @_spi(Core) public init(digests: [UInt8],
                                restarts: (offsets: [Int64], crc32s: [UInt32], compressedCRC32Cs: [UInt32])?) {
            self.digests = digests
            self.restarts = restarts
        }

        /// The records of a store the metadata of version 2 describes: its segment digests, and its restart points
        /// with their CRC-32s and CRC-32Cs (at the same interval); `nil` when they are not one record a segment in
        /// lowercase hexadecimal (a writer's fault, never a bundle's: only a writer makes records).
        @_spi(Core) public init?(_ segments: DocumentMetadata.SegmentDigests, restarts: DeflateRestarts?) {
            guard let digests = segments.rawDigests else { return nil }
            self.digests = digests
            guard let restarts else { return }
            let count = digests.count / 32
            guard restarts.interval == segments.interval, restarts.offsets.count == count else { return nil }
            var crcs: [UInt32] = [], compressed: [UInt32] = []
            for index in 0..<count {
                guard let crc = restarts.recordedCRC(ofSegment: index),
                      let compressedCRC = restarts.recordedCompressedCRC(ofSegment: index) else { return nil }
                crcs.append(crc)
                compressed.append(compressedCRC)
            }
            self.restarts = (restarts.offsets, crcs, compressed)
        }
    }

    /// The entry's size for `count` records: the header, the records and the tree's stored blocks; `nil` past
    /// 2⁶³ − 1 bytes.
    @_spi(Core) public static func entrySize(forCount count: Int) -> Int64? {
        guard count >= 0 else { return nil }
        let (records, overflow) = Int64(count).multipliedReportingOverflow(by: Int64(recordSize))
        guard !overflow else { return nil }
        let blocks = treeBlockCount(forDataBytes: records)
        let (tree, treeOverflow) = blocks.multipliedReportingOverflow(by: Int64(blockSize))
        guard !treeOverflow else { return nil }
        let (sum, sumOverflow) = records.addingReportingOverflow(tree)
        guard !sumOverflow, sum <= Int64.max - Int64(headerSize) else { return nil }
        return sum + Int64(headerSize)
    }

    /// How many hash blocks the tree over `dataBytes` bytes of records stores (every level below the top hash).
    @_spi(Core) public static func treeBlockCount(forDataBytes dataBytes: Int64) -> Int64 {
        var hashes = dataBytes / Int64(blockSize) + (dataBytes % Int64(blockSize) == 0 ? 0 : 1)
        var blocks: Int64 = 0
        let perBlock = Int64(blockSize / 32)
        while hashes > 1 {
            let levelBlocks = hashes / perBlock + (hashes % perBlock == 0 ? 0 : 1)
            blocks += levelBlocks
            hashes = levelBlocks
        }
        return blocks
    }

    /// The entry's bytes for `records` of a store laid out as `layout` says, and its root (lowercase hex).
    @_spi(Core) public static func encode(_ records: Records, layout: Layout) -> (bytes: [UInt8], root: String) {
        let count = records.digests.count / 32
        precondition(count == layout.count && layout.hasRestarts == (records.restarts != nil),
                     "one record a segment")
        var bytes = header(layout, count: count)
        bytes.reserveCapacity(Int(entrySize(forCount: count) ?? 0))
        for index in 0..<count {
            bytes.append(contentsOf: records.digests[(index * 32)..<(index * 32 + 32)])
            if let restarts = records.restarts {
                bytes.appendLE(UInt64(bitPattern: restarts.offsets[index]))
                bytes.appendLE(restarts.crc32s[index])
                bytes.appendLE(restarts.compressedCRC32Cs[index])
            } else {
                bytes.append(contentsOf: repeatElement(0, count: 16))
            }
        }
        let (tree, top) = bytes.withUnsafeBytes { hashTree(over: UnsafeRawBufferPointer(rebasing: $0[headerSize...])) }
        bytes.append(contentsOf: tree)
        return (bytes, root(header: Array(bytes[0..<headerSize]), top: top))
    }

    /// The 64-byte header for `count` records.
    private static func header(_ layout: Layout, count: Int) -> [UInt8] {
        var header = magic
        header.appendLE(UInt32(recordSize))
        header.appendLE(UInt32(blockSize))
        header.appendLE(UInt64(bitPattern: layout.size))
        header.appendLE(UInt64(bitPattern: layout.interval))
        header.appendLE(UInt64(count))
        header.appendLE(layout.hasRestarts ? hasRestartsFlag : 0)
        header.append(contentsOf: repeatElement(0, count: headerSize - header.count))
        return header
    }

    /// The root of an index entry's first 64 bytes and the hash tree over its `count` records, whatever they hold
    /// (what ``encode(_:layout:)`` returns for the entry it makes); `nil` when `bytes` is shorter than they need.
    @_spi(Core) public static func root(ofEntry bytes: [UInt8], count: Int) -> String? {
        let (records, overflow) = count.multipliedReportingOverflow(by: recordSize)
        guard count >= 0, !overflow, bytes.count - headerSize >= records else { return nil }
        let (_, top) = bytes.withUnsafeBytes {
            hashTree(over: UnsafeRawBufferPointer(rebasing: $0[headerSize..<(headerSize + records)]))
        }
        return root(header: Array(bytes[0..<headerSize]), top: top)
    }

    /// The root: the SHA-256 of the header and the top hash.
    private static func root(header: [UInt8], top: [UInt8]) -> String {
        var hasher = SHA256()
        hasher.update(data: header)
        hasher.update(data: top)
        return hasher.finalize().hexString
    }

    /// The tree's stored blocks over `data` (level 0 first) and its top hash.
    private static func hashTree(over data: UnsafeRawBufferPointer) -> (blocks: [UInt8], top: [UInt8]) {
        var hashes = hashBlocks(of: data)
        var stored: [UInt8] = []
        while hashes.count > 32 {
            let padding = (blockSize - hashes.count % blockSize) % blockSize
            hashes.append(contentsOf: repeatElement(0, count: padding))
            stored.append(contentsOf: hashes)
            hashes = hashes.withUnsafeBytes { hashBlocks(of: $0) }
        }
        return (stored, hashes.isEmpty ? Array(SHA256.hash(data: [UInt8]())) : hashes)
    }

    /// The SHA-256 of each 4,096-byte block of `data`, the last padded with zeros, concatenated.
    private static func hashBlocks(of data: UnsafeRawBufferPointer) -> [UInt8] {
        var hashes: [UInt8] = []
        hashes.reserveCapacity((data.count / blockSize + 1) * 32)
        var padded = [UInt8](repeating: 0, count: blockSize)
        for start in stride(from: 0, to: data.count, by: blockSize) {
            let end = min(data.count, start + blockSize)
            if end - start == blockSize {
                hashes.append(contentsOf: SHA256.hash(data: UnsafeRawBufferPointer(rebasing: data[start..<end])))
            } else {
                for index in padded.indices { padded[index] = 0 }
                padded.withUnsafeMutableBytes { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: data[start..<end])) }
                hashes.append(contentsOf: SHA256.hash(data: padded))
            }
        }
        return hashes
    }
}

extension StoreIndex {
    /// What a checked index gives: its records as they lie in the entry (32-byte digests, offsets, CRC-32s and
    /// CRC-32Cs), which ``DocumentMetadata/SegmentDigests`` and ``DeflateRestarts`` keep without spelling them.
    @_spi(Core) public struct Decoded: Sendable, Equatable {
        /// 32 bytes a segment.
        @_spi(Core) public var digests: [UInt8]
        @_spi(Core) public var offsets: [Int64]
        @_spi(Core) public var crc32s: [UInt32]?
        @_spi(Core) public var compressedCRC32Cs: [UInt32]?
        /// The store digest the records' digests make (FORMAT.md 13.1, ``DocumentMetadata/SegmentDigests/storeDigest(size:)``).
        @_spi(Core) public var storeDigest: String
    }

    /// Why an index entry is not the one the metadata describes.
    @_spi(Core) public enum Problem: Error, Equatable {
        /// A header field or the entry's size disagrees with the metadata (its reason names which).
        case mismatch(String)
        /// The records do not hash to the root, or a stored tree block is not the hash of what it covers.
        case damaged(String)
    }

    /// Checks `bytes`, the whole entry, against the metadata's `layout` and `root`, and decodes its records.
    ///
    /// Every number comes from a bundle: the sizes were checked by the caller (the entry is exactly
    /// ``entrySize(forCount:)`` bytes for the layout's count), and each header field must equal the metadata's.
    @_spi(Core) public static func decode(_ bytes: [UInt8], layout: Layout, root expectedRoot: String)
    throws(Problem) -> Decoded {
        guard let count = layout.count, let size = entrySize(forCount: count) else {
            throw .mismatch("the store's size and segment interval are out of range")
        }
        guard Int64(bytes.count) == size else {
            throw .mismatch("holds \(bytes.count) bytes where \(count) segments need \(size)")
        }
        let expectedHeader = header(layout, count: count)
        if let field = firstDifferentField(Array(bytes[0..<headerSize]), expectedHeader) {
            throw .mismatch("its header's \(field) is not the metadata's")
        }
        let dataEnd = headerSize + count * recordSize
        let (tree, top) = bytes.withUnsafeBytes { hashTree(over: UnsafeRawBufferPointer(rebasing: $0[headerSize..<dataEnd])) }
        guard root(header: expectedHeader, top: top) == expectedRoot else {
            throw .damaged("its records do not hash to 'store.index.root'")
        }
        if let block = zip(tree, bytes[dataEnd...]).enumerated().first(where: { $1.0 != $1.1 })?.offset {
            throw .damaged("its hash tree block \(block / blockSize) is not the hash of what it covers")
        }
        if !layout.hasRestarts,
           let index = (0..<count).first(where: { index in
               let start = headerSize + index * recordSize + 32
               return bytes[start..<(start + 16)].contains { $0 != 0 }
           }) {
            throw .mismatch("record \(index) has restart fields, but the store has no restart points (they are zero)")
        }
        return decodedRecords(bytes, layout: layout, count: count)
    }

    /// The name of the first header field where `found` differs from `expected`, if any.
    private static func firstDifferentField(_ found: [UInt8], _ expected: [UInt8]) -> String? {
        let fields: [(String, Range<Int>)] = [("magic", 0..<8), ("record size", 8..<12), ("block size", 12..<16),
                                              ("store size", 16..<24), ("segment interval", 24..<32),
                                              ("segment count", 32..<40), ("flags", 40..<44),
                                              ("reserved bytes", 44..<64)]
        return fields.first { found[$0.1] != expected[$0.1] }?.0
    }

    /// The records, field by field (restart fields only with `hasRestarts`), and the store digest of `layout`'s
    /// size and interval their digests make: copied into arrays of their final size, nothing spelled.
    private static func decodedRecords(_ bytes: [UInt8], layout: Layout, count: Int) -> Decoded {
        let hasRestarts = layout.hasRestarts
        var decoded = Decoded(digests: [], offsets: [], crc32s: nil, compressedCRC32Cs: nil, storeDigest: "")
        bytes.withUnsafeBytes { source in
            decoded.digests = [UInt8](unsafeUninitializedCapacity: count * 32) { digests, filled in
                let target = UnsafeMutableRawBufferPointer(digests)
                for index in 0..<count {
                    let start = headerSize + index * recordSize
                    UnsafeMutableRawBufferPointer(rebasing: target[(index * 32)..<(index * 32 + 32)])
                        .copyMemory(from: UnsafeRawBufferPointer(rebasing: source[start..<(start + 32)]))
                }
                filled = count * 32
            }
            guard hasRestarts else { return }
            func field<T: FixedWidthInteger>(at offset: Int, as: T.Type) -> [T] {
                [T](unsafeUninitializedCapacity: count) { values, filled in
                    for index in 0..<count {
                        values[index] = T(littleEndian: source.loadUnaligned(fromByteOffset: headerSize + index * recordSize + offset,
                                                                            as: T.self))
                    }
                    filled = count
                }
            }
            decoded.offsets = field(at: 32, as: Int64.self)
            decoded.crc32s = field(at: 40, as: UInt32.self)
            decoded.compressedCRC32Cs = field(at: 44, as: UInt32.self)
        }
        decoded.storeDigest = storeDigest(size: layout.size, interval: layout.interval, digests: decoded.digests)
        return decoded
    }

    /// The store digest of format version 2 (FORMAT.md 13.1) of a store of `size` bytes cut into segments of
    /// `interval` bytes whose SHA-256s are `digests` (32 raw bytes each, concatenated).
    @_spi(Core) public static func storeDigest(size: Int64, interval: Int64, digests: [UInt8]) -> String {
        var hasher = SHA256()
        hasher.update(data: Array("MDZ-store-digest-2".utf8))
        withUnsafeBytes(of: UInt64(bitPattern: size).littleEndian) { hasher.update(bufferPointer: $0) }
        withUnsafeBytes(of: UInt64(bitPattern: interval).littleEndian) { hasher.update(bufferPointer: $0) }
        hasher.update(data: digests)
        return hasher.finalize().hexString
    }
}

/// How errors name where a store's segment records are kept: the metadata's keys in format versions 1 and 2, the
/// store index in version 3 (whose metadata text has no such keys), so that a person looking for them finds them.
@_spi(Core) public struct RecordNames: Sendable {
    /// The segment digests: `'store.segments'`, or the store index.
    @_spi(Core) public let digests: String
    /// The restart points: `'store.deflateRestarts'`, or the store index's restart points.
    @_spi(Core) public let restarts: String
    /// The restart segments' CRC-32s: `'store.deflateRestarts.crc32s'`, or the store index.
    @_spi(Core) public let crc32s: String
    /// The restart segments' compressed CRC-32Cs: `'store.deflateRestarts.compressedCRC32Cs'`, or the store index.
    @_spi(Core) public let compressedCRC32Cs: String

    /// The names in a bundle of format `version`.
    @_spi(Core) public init(formatVersion version: Int) {
        if version >= 3 {
            let index = "the store index ('\(BundleLayout.storeIndex)')"
            (digests, restarts, crc32s, compressedCRC32Cs) = (index, "the restart points in \(index)", index, index)
        } else {
            (digests, restarts, crc32s, compressedCRC32Cs) = ("'store.segments'", "'store.deflateRestarts'",
                                                              "'store.deflateRestarts.crc32s'",
                                                              "'store.deflateRestarts.compressedCRC32Cs'")
        }
    }
}
