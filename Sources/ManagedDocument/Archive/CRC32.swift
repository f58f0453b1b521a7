import CArchive

/// zlib's CRC-32, the checksum zip stores for every entry.
struct CRC32 {
    /// The CRC-32 of A followed by B, from the CRCs of A and B and B's length (zlib's `crc32_combine`).
    static func combine(_ crcA: UInt32, _ crcB: UInt32, lengthB: Int) -> UInt32 {
        UInt32(truncatingIfNeeded: crc32_combine(UInt(crcA), UInt(crcB), lengthB))
    }

    private(set) var value: UInt32 = 0

    mutating func update(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { update($0) }
    }

    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress else { return }
        var offset = 0
        while offset < bytes.count {
            let chunk = min(bytes.count - offset, Int(UInt32.max >> 1))
            value = crc32_gzip_refl(value, base.assumingMemoryBound(to: UInt8.self) + offset, UInt64(chunk))
            offset += chunk
        }
    }
}

/// Whether deflating is worth it: a sample of the data (its first 64 KiB) shrinks by at least 5 % at ISA-L's level 1.
/// Already-compressed content (photos, archives) is stored instead, which is faster to write and to read.
func isWorthDeflating(_ sample: UnsafeRawBufferPointer) -> Bool {
    guard sample.count >= 512, let deflated = DeflateEngine.deflatedSize(of: sample) else { return true }
    return Double(deflated) < Double(sample.count) * 0.95
}
