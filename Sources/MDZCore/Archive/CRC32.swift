import CArchive

/// zlib's CRC-32, the checksum zip stores for every entry.
@_spi(Core) public struct CRC32: Sendable {
    @_spi(Core) public init() {}

    /// The CRC-32 of A followed by B, from the CRCs of A and B and B's length (zlib's `crc32_combine`).
    @_spi(Core) public static func combine(_ crcA: UInt32, _ crcB: UInt32, lengthB: Int) -> UInt32 {
        UInt32(truncatingIfNeeded: crc32_combine(UInt(crcA), UInt(crcB), lengthB))
    }

    /// zlib's `crc32_combine_op` for one length of B, made once (`crc32_combine_gen`): what combines many CRCs of
    /// pieces of the same length.
    @_spi(Core) public struct Combiner: Sendable {
        private let op: UInt

        @_spi(Core) public init(lengthB: Int) { op = UInt(crc32_combine_gen(lengthB)) }

        /// The CRC-32 of A followed by B, B of the length this combiner was made for.
        @_spi(Core) public func combine(_ crcA: UInt32, _ crcB: UInt32) -> UInt32 {
            UInt32(truncatingIfNeeded: crc32_combine_op(UInt(crcA), UInt(crcB), op))
        }
    }

    @_spi(Core) public private(set) var value: UInt32 = 0

    @_spi(Core) public mutating func update(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { update($0) }
    }

    @_spi(Core) public mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress else { return }
        var offset = 0
        while offset < bytes.count {
            let chunk = min(bytes.count - offset, Int(UInt32.max >> 1))
            value = crc32_gzip_refl(value, base.assumingMemoryBound(to: UInt8.self) + offset, UInt64(chunk))
            offset += chunk
        }
    }
}

/// The CRC-32C (Castagnoli) of bytes, with ISA-L's `crc32_iscsi` (SSE4.2's `crc32` instruction where there is one):
/// the checksum of each restart segment's compressed bytes (FORMAT.md 13.1, `compressedCRC32Cs`), checked at many GB/s
/// where a save copies those bytes.
@_spi(Core) public struct CRC32C: Sendable {
    @_spi(Core) public init() {}

    /// ISA-L's running value: the standard CRC-32C's register, not yet inverted.
    private var register: UInt32 = 0xFFFF_FFFF

    /// The CRC-32C of every byte given so far.
    @_spi(Core) public var value: UInt32 { ~register }

    @_spi(Core) public mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress else { return }
        var offset = 0
        while offset < bytes.count {
            let chunk = min(bytes.count - offset, Int(Int32.max))
            register = crc32_iscsi(UnsafeMutablePointer(mutating: base.assumingMemoryBound(to: UInt8.self) + offset),
                                   Int32(chunk), register)
            offset += chunk
        }
    }

    /// The CRC-32C of `bytes`.
    @_spi(Core) public static func of(_ bytes: UnsafeRawBufferPointer) -> UInt32 {
        var crc = CRC32C()
        crc.update(bytes)
        return crc.value
    }
}
