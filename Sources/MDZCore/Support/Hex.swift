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
    @_spi(Core) public var hexString: String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        for byte in self {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}

extension SHA256.Digest {
    /// The digest in lowercase hexadecimal (64 digits), as the metadata spells it.
    @_spi(Core) public var hexString: String { Array(self).hexString }
}
