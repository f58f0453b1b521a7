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
