#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// The zip records the writer encodes and the reader checks (PKWARE APPNOTE 6.3.x, sections 4.3.7 to 4.3.16).
//
// The writer lays down every byte of a bundle with these encoders (``ArchiveWriter``), so its layout depends on no
// library's release. The reader checks the directory's structure (offsets, overlaps, sizes, flags) with the decoders
// before libarchive, which does not expose where an entry's bytes lie, inflates a single byte.

/// One central-directory file header, with zip64 values already resolved to 64 bits.
@_spi(Core) public struct ZipCentralRecord: Equatable, Sendable {
    /// A record of zeros and defaults (a Unix "made by", version 2.0 needed, 1980-01-01), its fields set one by one.
    @_spi(Core) public init() {}

    @_spi(Core) public var versionMadeBy: UInt16 = 0x031E  // Unix, APPNOTE 3.0
    @_spi(Core) public var versionNeeded: UInt16 = 20
    @_spi(Core) public var flags: UInt16 = 0
    @_spi(Core) public var method: UInt16 = 0
    @_spi(Core) public var modificationTime: UInt16 = 0
    @_spi(Core) public var modificationDate: UInt16 = 0x21  // 1980-01-01
    @_spi(Core) public var crc32: UInt32 = 0
    @_spi(Core) public var compressedSize: UInt64 = 0
    @_spi(Core) public var uncompressedSize: UInt64 = 0
    @_spi(Core) public var diskStart: UInt32 = 0
    @_spi(Core) public var internalAttributes: UInt16 = 0
    @_spi(Core) public var externalAttributes: UInt32 = 0
    @_spi(Core) public var localHeaderOffset: UInt64 = 0
    @_spi(Core) public var name: [UInt8] = []
    /// Extra fields other than zip64 (0x0001), which is derived when the record is encoded.
    @_spi(Core) public var extraFields: [ZipExtraField] = []
    @_spi(Core) public var comment: [UInt8] = []

    @_spi(Core) public static let signature: UInt32 = 0x0201_4b50
    @_spi(Core) public static let fixedSize = 46

    @_spi(Core) public var isEncrypted: Bool { flags & 0x0001 != 0 || flags & 0x0040 != 0 }
    @_spi(Core) public var hasDataDescriptor: Bool { flags & 0x0008 != 0 }
    /// The Unix file type from the external attributes, when the entry was made on Unix (`S_IFMT` bits).
    @_spi(Core) public var unixFileType: UInt32? {
        (versionMadeBy >> 8) == 3 ? (externalAttributes >> 16) & 0o170000 : nil
    }

    /// Encodes the record, adding a zip64 extra field for the values that need 64 bits.
    /// With `forcesZIP64`, all three values go into the zip64 field whatever their size.
    @_spi(Core) public func encoded(forcesZIP64: Bool = false) -> [UInt8] {
        let max32 = UInt64(UInt32.max)
        var zip64: [UInt8] = []
        let wideUncompressed = forcesZIP64 || uncompressedSize >= max32
        let wideCompressed = forcesZIP64 || compressedSize >= max32
        let wideOffset = forcesZIP64 || localHeaderOffset >= max32
        if wideUncompressed { zip64.appendLE(uncompressedSize) }
        if wideCompressed { zip64.appendLE(compressedSize) }
        if wideOffset { zip64.appendLE(localHeaderOffset) }
        var extra: [UInt8] = []
        if !zip64.isEmpty {
            extra.appendLE(UInt16(0x0001))
            extra.appendLE(UInt16(zip64.count))
            extra += zip64
        }
        for field in extraFields {
            extra.appendLE(field.id)
            extra.appendLE(UInt16(field.data.count))
            extra += field.data
        }
        var out: [UInt8] = []
        out.reserveCapacity(Self.fixedSize + name.count + extra.count + comment.count)
        out.appendLE(Self.signature)
        out.appendLE(versionMadeBy)
        out.appendLE(zip64.isEmpty ? versionNeeded : max(versionNeeded, 45))
        out.appendLE(flags)
        out.appendLE(method)
        out.appendLE(modificationTime)
        out.appendLE(modificationDate)
        out.appendLE(crc32)
        out.appendLE(wideCompressed ? UInt32.max : UInt32(compressedSize))
        out.appendLE(wideUncompressed ? UInt32.max : UInt32(uncompressedSize))
        out.appendLE(UInt16(name.count))
        out.appendLE(UInt16(extra.count))
        out.appendLE(UInt16(comment.count))
        out.appendLE(UInt16(diskStart))
        out.appendLE(internalAttributes)
        out.appendLE(externalAttributes)
        out.appendLE(wideOffset ? UInt32.max : UInt32(localHeaderOffset))
        out += name
        out += extra
        out += comment
        return out
    }
}

@_spi(Core) public struct ZipExtraField: Equatable, Sendable {
    @_spi(Core) public var id: UInt16
    @_spi(Core) public var data: [UInt8]
}

/// Why a directory could not be parsed; the caller turns it into a ``DocumentError`` naming the file.
@_spi(Core) public struct ZipStructureFailure: Error, Sendable {
    @_spi(Core) public enum Kind: Sendable { case notZip, corrupt, truncated, limit }
    @_spi(Core) public var kind: Kind
    @_spi(Core) public var message: String
}

/// The end of central directory, zip64 records resolved.
@_spi(Core) public struct ZipEndRecord: Sendable {
    @_spi(Core) public var entryCount: UInt64
    @_spi(Core) public var directorySize: UInt64
    @_spi(Core) public var directoryOffset: UInt64
    /// Where the end records start (the zip64 end record when there is one): the directory must end here.
    @_spi(Core) public var endRecordsOffset: UInt64
    /// Whether zip64 end records are present.
    @_spi(Core) public var isZIP64 = false

    @_spi(Core) public static let signature: UInt32 = 0x0605_4b50
    @_spi(Core) public static let zip64Signature: UInt32 = 0x0606_4b50
    @_spi(Core) public static let zip64LocatorSignature: UInt32 = 0x0706_4b50

    /// Encodes the end records for a directory, with zip64 records when any value needs them.
    @_spi(Core) public static func encode(entryCount: UInt64, directorySize: UInt64, directoryOffset: UInt64,
                       forcesZIP64: Bool = false) -> [UInt8] {
        var out: [UInt8] = []
        let needsZip64 = forcesZIP64 || entryCount >= 0xFFFF || directorySize >= 0xFFFF_FFFF
            || directoryOffset >= 0xFFFF_FFFF
        if needsZip64 {
            let zip64Offset = directoryOffset + directorySize
            out.appendLE(zip64Signature)
            out.appendLE(UInt64(44))
            out.appendLE(UInt16(0x032D))  // made by Unix, 4.5
            out.appendLE(UInt16(45))
            out.appendLE(UInt32(0))
            out.appendLE(UInt32(0))
            out.appendLE(entryCount)
            out.appendLE(entryCount)
            out.appendLE(directorySize)
            out.appendLE(directoryOffset)
            out.appendLE(zip64LocatorSignature)
            out.appendLE(UInt32(0))
            out.appendLE(zip64Offset)
            out.appendLE(UInt32(1))
        }
        out.appendLE(signature)
        out.appendLE(UInt16(0))
        out.appendLE(UInt16(0))
        out.appendLE(UInt16(min(entryCount, 0xFFFF)))
        out.appendLE(UInt16(min(entryCount, 0xFFFF)))
        out.appendLE(UInt32(min(directorySize, 0xFFFF_FFFF)))
        out.appendLE(UInt32(min(directoryOffset, 0xFFFF_FFFF)))
        out.appendLE(UInt16(0))
        return out
    }

    /// Finds and decodes the end records from the file's tail.
    ///
    /// - Parameters:
    ///   - fileSize: the archive's size in bytes.
    ///   - read: reads `count` bytes at an offset (fewer only at the end of the file).
    @_spi(Core)
    public static func locate(fileSize: UInt64, read: (UInt64, Int) throws -> [UInt8]) throws -> ZipEndRecord {
        guard fileSize >= 22 else { throw ZipStructureFailure(kind: .notZip, message: "too short to be a zip archive") }
        let tailLength = Int(min(fileSize, 22 + 0xFFFF))
        let tailStart = fileSize - UInt64(tailLength)
        let tail = try read(tailStart, tailLength)
        guard tail.count == tailLength else { throw ZipStructureFailure(kind: .truncated, message: "short read") }
        var position = tailLength - 22
        var found: Int?
        while position >= 0 {
            if tail.readLE32(at: position) == signature,
               Int(tail.readLE16(at: position + 20)) == tailLength - position - 22 {
                found = position
                break
            }
            position -= 1
        }
        guard let eocd = found else {
            throw ZipStructureFailure(kind: .notZip, message: "no end-of-central-directory record")
        }
        let disk = tail.readLE16(at: eocd + 4), directoryDisk = tail.readLE16(at: eocd + 6)
        guard disk == 0, directoryDisk == 0 else {
            throw ZipStructureFailure(kind: .corrupt, message: "multi-volume archives are not supported")
        }
        var record = ZipEndRecord(
            entryCount: UInt64(tail.readLE16(at: eocd + 10)),
            directorySize: UInt64(tail.readLE32(at: eocd + 12)),
            directoryOffset: UInt64(tail.readLE32(at: eocd + 16)),
            endRecordsOffset: tailStart + UInt64(eocd))
        // A zip64 locator sits right before the end record.
        // > (An end record in the first 20 bytes has no room for a locator: computed only when there is.)
        if tailStart + UInt64(eocd) >= 20 {
            let locatorOffset = tailStart + UInt64(eocd) - 20
            let locator = try read(locatorOffset, 20)
            if locator.count == 20, locator.readLE32(at: 0) == zip64LocatorSignature {
                let zip64Offset = locator.readLE64(at: 8)
                let (zip64End, overflow) = zip64Offset.addingReportingOverflow(56)
                guard !overflow, zip64End <= locatorOffset else {
                    throw ZipStructureFailure(kind: .corrupt, message: "zip64 end record outside the file")
                }
                let zip64 = try read(zip64Offset, 56)
                guard zip64.count == 56, zip64.readLE32(at: 0) == zip64Signature else {
                    throw ZipStructureFailure(kind: .corrupt, message: "bad zip64 end record signature")
                }
                guard zip64.readLE32(at: 16) == 0, zip64.readLE32(at: 20) == 0 else {
                    throw ZipStructureFailure(kind: .corrupt, message: "multi-volume archives are not supported")
                }
                record.entryCount = zip64.readLE64(at: 32)
                record.directorySize = zip64.readLE64(at: 40)
                record.directoryOffset = zip64.readLE64(at: 48)
                record.endRecordsOffset = zip64Offset
                record.isZIP64 = true
            }
        }
        let (end, overflow) = record.directoryOffset.addingReportingOverflow(record.directorySize)
        guard !overflow, end <= record.endRecordsOffset else {
            throw ZipStructureFailure(kind: .corrupt, message: "central directory lies outside the file")
        }
        guard end == record.endRecordsOffset else {
            throw ZipStructureFailure(kind: .corrupt, message: "unexpected bytes between the central directory and its end record")
        }
        return record
    }
}

@_spi(Core) public enum ZipCentralDirectory: Sendable {
    /// Decodes `count` records (or all of them when `count` is nil) from the start of `bytes`.
    ///
    /// - Returns: the records and the number of bytes they took.
    @_spi(Core)
    public static func decode(_ bytes: [UInt8], count: UInt64?) throws -> (records: [ZipCentralRecord], length: Int) {
        var records: [ZipCentralRecord] = []
        var position = 0
        while count.map({ UInt64(records.count) < $0 }) ?? true {
            guard position + ZipCentralRecord.fixedSize <= bytes.count else {
                if count == nil { break }
                throw ZipStructureFailure(kind: .corrupt, message: "central directory is shorter than its entry count")
            }
            guard bytes.readLE32(at: position) == ZipCentralRecord.signature else {
                if count == nil { break }
                throw ZipStructureFailure(kind: .corrupt, message: "bad central directory signature")
            }
            var record = ZipCentralRecord()
            record.versionMadeBy = bytes.readLE16(at: position + 4)
            record.versionNeeded = bytes.readLE16(at: position + 6)
            record.flags = bytes.readLE16(at: position + 8)
            record.method = bytes.readLE16(at: position + 10)
            record.modificationTime = bytes.readLE16(at: position + 12)
            record.modificationDate = bytes.readLE16(at: position + 14)
            record.crc32 = bytes.readLE32(at: position + 16)
            record.compressedSize = UInt64(bytes.readLE32(at: position + 20))
            record.uncompressedSize = UInt64(bytes.readLE32(at: position + 24))
            let nameLength = Int(bytes.readLE16(at: position + 28))
            let extraLength = Int(bytes.readLE16(at: position + 30))
            let commentLength = Int(bytes.readLE16(at: position + 32))
            record.diskStart = UInt32(bytes.readLE16(at: position + 34))
            record.internalAttributes = bytes.readLE16(at: position + 36)
            record.externalAttributes = bytes.readLE32(at: position + 38)
            record.localHeaderOffset = UInt64(bytes.readLE32(at: position + 42))
            let nameStart = position + ZipCentralRecord.fixedSize
            let end = nameStart + nameLength + extraLength + commentLength
            guard end <= bytes.count else {
                throw ZipStructureFailure(kind: .corrupt, message: "central directory record runs past its end")
            }
            record.name = Array(bytes[nameStart..<nameStart + nameLength])
            let extra = Array(bytes[nameStart + nameLength..<nameStart + nameLength + extraLength])
            record.comment = Array(bytes[nameStart + nameLength + extraLength..<end])
            try decodeExtraFields(extra, into: &record)
            guard record.diskStart == 0 else {
                throw ZipStructureFailure(kind: .corrupt, message: "multi-volume archives are not supported")
            }
            records.append(record)
            position = end
        }
        return (records, position)
    }

    private static func decodeExtraFields(_ extra: [UInt8], into record: inout ZipCentralRecord) throws {
        var position = 0
        while position + 4 <= extra.count {
            let id = extra.readLE16(at: position)
            let length = Int(extra.readLE16(at: position + 2))
            guard position + 4 + length <= extra.count else {
                throw ZipStructureFailure(kind: .corrupt, message: "extra field runs past its record")
            }
            let data = Array(extra[position + 4..<position + 4 + length])
            if id == 0x0001 {
                var cursor = 0
                func next(_ value: inout UInt64) throws {
                    guard value == 0xFFFF_FFFF else { return }
                    guard cursor + 8 <= data.count else {
                        throw ZipStructureFailure(kind: .corrupt, message: "zip64 extra field is too short")
                    }
                    value = data.readLE64(at: cursor)
                    cursor += 8
                }
                try next(&record.uncompressedSize)
                try next(&record.compressedSize)
                try next(&record.localHeaderOffset)
            } else {
                record.extraFields.append(ZipExtraField(id: id, data: data))
            }
            position += 4 + length
        }
    }
}

/// The fixed part of a local file header (APPNOTE 4.3.7).
@_spi(Core) public struct ZipLocalHeader: Sendable {
    @_spi(Core) public static let signature: UInt32 = 0x0403_4b50
    @_spi(Core) public static let fixedSize = 30

    @_spi(Core) public var flags: UInt16
    @_spi(Core) public var method: UInt16
    @_spi(Core) public var crc32: UInt32
    @_spi(Core) public var compressedSize: UInt32
    @_spi(Core) public var uncompressedSize: UInt32
    @_spi(Core) public var nameLength: Int
    @_spi(Core) public var extraLength: Int

    @_spi(Core) public init?(_ bytes: [UInt8]) {
        guard bytes.count >= Self.fixedSize, bytes.readLE32(at: 0) == Self.signature else { return nil }
        flags = bytes.readLE16(at: 6)
        method = bytes.readLE16(at: 8)
        crc32 = bytes.readLE32(at: 14)
        compressedSize = bytes.readLE32(at: 18)
        uncompressedSize = bytes.readLE32(at: 22)
        nameLength = Int(bytes.readLE16(at: 26))
        extraLength = Int(bytes.readLE16(at: 28))
    }

    /// A stored entry with no extra field and no data descriptor: the `mimetype` entry of a bundle.
    @_spi(Core)
    public static func encodeStored(name: [UInt8], content: [UInt8], crc32: UInt32, time: UInt16, date: UInt16) -> [UInt8] {
        var out: [UInt8] = []
        out.appendLE(signature)
        out.appendLE(UInt16(10))  // version needed: 1.0, stored
        out.appendLE(UInt16(0))  // flags
        out.appendLE(UInt16(0))  // method: stored
        out.appendLE(time)
        out.appendLE(date)
        out.appendLE(crc32)
        out.appendLE(UInt32(content.count))
        out.appendLE(UInt32(content.count))
        out.appendLE(UInt16(name.count))
        out.appendLE(UInt16(0))
        out += name
        out += content
        return out
    }
}

/// An entry after `mimetype` as the writer streams it (APPNOTE 4.3.7 to 4.3.9): a local header whose CRC-32 and
/// compressed size follow the data in a data descriptor (flag bit 3), the data, the descriptor.
///
/// Every such entry carries the extended-timestamp field (0x5455, its modification time) in both headers. Where its
/// sizes may need 64 bits (``isZIP64``) the local header has a zip64 field and the descriptor 8-byte sizes, which
/// must be decided before the data is written; the central record takes zip64 values only where they are needed.
@_spi(Core) public struct ZipStreamedEntry: Sendable {
    /// Memberwise.
    @_spi(Core) public init(name: [UInt8], method: UInt16, size: UInt64, time: UInt16, date: UInt16, unixTime: Int64, isZIP64: Bool) {
        self.name = name
        self.method = method
        self.size = size
        self.time = time
        self.date = date
        self.unixTime = unixTime
        self.isZIP64 = isZIP64
    }

    /// A classic 32-bit size field holds values below this; 0xFFFFFFFF itself means "in the zip64 field".
    @_spi(Core) public static let classicLimit = UInt64(UInt32.max)
    @_spi(Core) public static let descriptorSignature: UInt32 = 0x0807_4b50

    @_spi(Core) public var name: [UInt8]
    /// 0 stored, 8 deflated.
    @_spi(Core) public var method: UInt16
    /// The uncompressed size, known before the data.
    @_spi(Core) public var size: UInt64
    @_spi(Core) public var time: UInt16
    @_spi(Core) public var date: UInt16
    /// Seconds since 1970, for the extended-timestamp field (clamped to its signed 32 bits).
    @_spi(Core) public var unixTime: Int64
    @_spi(Core) public var isZIP64: Bool

    /// Data descriptor, and UTF-8 names (bit 11) when the name is not ASCII, as python's zipfile marks them.
    @_spi(Core) public var flags: UInt16 { 0x0008 | (name.contains { $0 >= 0x80 } ? 0x0800 : 0) }
    @_spi(Core) public var versionNeeded: UInt16 { method == 8 ? 20 : 10 }

    private var timestampField: ZipExtraField {
        var data: [UInt8] = [0x01]  // modification time only
        data.appendLE(Int32(clamping: unixTime))
        return ZipExtraField(id: 0x5455, data: data)
    }

    /// The local header: CRC-32 0 and, deflated, compressed size 0 (both in the descriptor); the uncompressed size,
    /// which is known, in its field (stored: in both size fields, as they are equal).
    @_spi(Core) public func localHeader() -> [UInt8] {
        var extra: [UInt8] = []
        if isZIP64 {
            extra.appendLE(UInt16(0x0001))
            extra.appendLE(UInt16(16))
            extra.appendLE(size)
            extra.appendLE(method == 0 ? size : 0)
        }
        let field = timestampField
        extra.appendLE(field.id)
        extra.appendLE(UInt16(field.data.count))
        extra += field.data
        var out: [UInt8] = []
        out.reserveCapacity(ZipLocalHeader.fixedSize + name.count + extra.count)
        out.appendLE(ZipLocalHeader.signature)
        out.appendLE(isZIP64 ? 45 : versionNeeded)
        out.appendLE(flags)
        out.appendLE(method)
        out.appendLE(time)
        out.appendLE(date)
        out.appendLE(UInt32(0))
        out.appendLE(isZIP64 ? UInt32.max : method == 0 ? UInt32(size) : 0)
        out.appendLE(isZIP64 ? UInt32.max : UInt32(size))
        out.appendLE(UInt16(name.count))
        out.appendLE(UInt16(extra.count))
        out += name
        out += extra
        return out
    }

    /// The data descriptor, with its signature: 16 bytes, or 24 with 8-byte sizes for a zip64 entry.
    @_spi(Core) public func dataDescriptor(crc32: UInt32, compressedSize: UInt64) -> [UInt8] {
        var out: [UInt8] = []
        out.appendLE(Self.descriptorSignature)
        out.appendLE(crc32)
        if isZIP64 {
            out.appendLE(compressedSize)
            out.appendLE(size)
        } else {
            out.appendLE(UInt32(compressedSize))
            out.appendLE(UInt32(size))
        }
        return out
    }

    /// The entry's central directory record (external attributes left to the caller).
    @_spi(Core)
    public func centralRecord(crc32: UInt32, compressedSize: UInt64, localHeaderOffset: UInt64) -> ZipCentralRecord {
        var record = ZipCentralRecord()
        record.versionNeeded = versionNeeded
        record.flags = flags
        record.method = method
        record.modificationTime = time
        record.modificationDate = date
        record.crc32 = crc32
        record.compressedSize = compressedSize
        record.uncompressedSize = size
        record.localHeaderOffset = localHeaderOffset
        record.name = name
        record.extraFields = [timestampField]
        return record
    }
}

extension Array where Element == UInt8 {
    @_spi(Core) public mutating func appendLE<T: FixedWidthInteger>(_ value: T) {
        Swift.withUnsafeBytes(of: value.littleEndian) { append(contentsOf: $0) }
    }

    /// Overwrites `MemoryLayout<T>.size` bytes at `offset`, little-endian.
    @_spi(Core) public mutating func writeLE<T: FixedWidthInteger>(_ value: T, at offset: Int) {
        Swift.withUnsafeBytes(of: value.littleEndian) { bytes in
            for (index, byte) in bytes.enumerated() { self[offset + index] = byte }
        }
    }

    @_spi(Core) public func readLE16(at offset: Int) -> UInt16 {
        UInt16(self[offset]) | UInt16(self[offset + 1]) << 8
    }

    @_spi(Core) public func readLE32(at offset: Int) -> UInt32 {
        UInt32(readLE16(at: offset)) | UInt32(readLE16(at: offset + 2)) << 16
    }

    @_spi(Core) public func readLE64(at offset: Int) -> UInt64 {
        UInt64(readLE32(at: offset)) | UInt64(readLE32(at: offset + 4)) << 32
    }
}

/// DOS date and time (APPNOTE 4.4.6), as zip stores a modification time: years 1980 to 2107, so a time outside
/// them is clamped to the nearest end (`Date.distantFuture` is written as the last day of 2107, never a trap).
@_spi(Core) public func dosDateTime(secondsSince1970 seconds: Int64) -> (time: UInt16, date: UInt16) {
    if seconds < 315_532_800 { return (0, 0x21) }  // before 1980-01-01: the first DOS day
    if seconds >= 4_354_819_200 { return (0xBF7D, 0xFF9F) }  // 2108-01-01 or later: 2107-12-31 23:59:58
    var t = time_t(seconds)
    var parts = tm()
    gmtime_r(&t, &parts)
    let year = Int(parts.tm_year) + 1900
    let date = UInt16((year - 1980) << 9 | (Int(parts.tm_mon) + 1) << 5 | Int(parts.tm_mday))
    let time = UInt16(Int(parts.tm_hour) << 11 | Int(parts.tm_min) << 5 | Int(parts.tm_sec) / 2)
    return (time, date)
}

/// The zip container convention bundles follow (as ODF and EPUB containers do): a bare first entry naming the media
/// type, which readers check and the writer puts first.
@_spi(Core) public enum ZipContainer {
    /// The name of the bare first entry that holds the media type.
    @_spi(Core) public static let mimetypeEntryName = "mimetype"
}
