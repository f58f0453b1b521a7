import CArchive

/// zlib's CRC-32, the checksum zip stores for every entry.
struct CRC32 {
    private(set) var value: UInt32 = 0

    mutating func update(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { update($0) }
    }

    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress else { return }
        var offset = 0
        while offset < bytes.count {
            let chunk = min(bytes.count - offset, Int(UInt32.max >> 1))
            value = carchive_crc32(value, base + offset, UInt32(chunk))
            offset += chunk
        }
    }
}

/// Whether deflating is worth it: a sample of the data (its first 64 KiB) shrinks by at least 5 % at ISA-L's level 1.
/// Already-compressed content (photos, archives) is stored instead, which is faster to write and to read.
func isWorthDeflating(_ sample: UnsafeRawBufferPointer) -> Bool {
    guard let base = sample.baseAddress, sample.count >= 512 else { return true }
    let deflated = carchive_deflated_size(base, UInt(sample.count))
    return deflated == 0 || Double(deflated) < Double(sample.count) * 0.95
}
