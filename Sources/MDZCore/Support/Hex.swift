import Crypto

/// Lowercase hexadecimal, as the metadata spells digests and CRC-32s.
@_spi(Core) public enum Hex: Sendable {
    /// The value of one lowercase hexadecimal digit; `nil` for any other character.
    @_spi(Core) public static func nibble(_ character: UInt8) -> UInt8? {
        switch character {
        case 0x30...0x39: return character - 0x30
        case 0x61...0x66: return character - 0x61 + 10
        default: return nil
        }
    }
}

extension Sequence where Element == UInt8 {
    /// The bytes in lowercase hexadecimal, two digits a byte.
    /// Two digits a byte from a table, into a string of its final size: the 4 MB of digests of a 16 GiB store's
    /// index spell in milliseconds.
    @_spi(Core) public var hexString: String {
        withContiguousStorageIfAvailable(Hex.spelled) ?? Array(self).withUnsafeBufferPointer(Hex.spelled)
    }
}

extension Hex {
    /// `bytes` in lowercase hexadecimal.
    fileprivate static func spelled(_ bytes: UnsafeBufferPointer<UInt8>) -> String {
        let length = bytes.count * 2
        return pairs.withUnsafeBufferPointer { pairs in
            String(unsafeUninitializedCapacity: length) { text in
                for (index, byte) in bytes.enumerated() {
                    let pair = pairs[Int(byte)]
                    text[2 * index] = UInt8(truncatingIfNeeded: pair >> 8)
                    text[2 * index + 1] = UInt8(truncatingIfNeeded: pair)
                }
                return length
            }
        }
    }

    /// Each byte's two lowercase hexadecimal digits, high digit in the high byte.
    private static let pairs: [UInt16] = (0..<256).map { byte in
        let digits = Array("0123456789abcdef".utf8)
        return UInt16(digits[byte >> 4]) << 8 | UInt16(digits[byte & 0x0F])
    }
}

extension SHA256.Digest {
    /// The digest in lowercase hexadecimal (64 digits), as the metadata spells it.
    @_spi(Core) public var hexString: String { Array(self).hexString }
}
