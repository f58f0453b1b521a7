#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
@_spi(Core) import MDZCore

/// The `map` file of a writable working copy (FORMAT.md 16.2): which pages `overlay` holds, and the store's logical
/// size. A header names the base the overlay was written over; records are appended, one at each `xSync` of the
/// store, and the map is read back up to its last good record.
///
/// Every integer is little-endian. The header:
///
/// ```
/// magic "MDOVMAP\n" (8 bytes), version u32 (1), page size u32,
/// base identity: device i64, inode i64, size i64, modified ns i64, changed ns i64,
/// base store size i64, digest length u32, digest (UTF-8), CRC-32 of all the header's bytes before it u32
/// ```
///
/// A record:
///
/// ```
/// body length u32, then the body: kind u32 (1: pages), sequence u64 (1, 2, 3 …), logical size after i64,
/// base limit after i64, page count u32, page numbers u64 × count; then the CRC-32 of the length and the body u32
/// ```
///
/// A pending-base record (kind 2), appended by a save before its new bundle is renamed into place, names the store
/// digest of that bundle: when recovery finds another bundle than the header's under the document's name, and it is
/// the one the last record names, the overlay's content is in it.
///
/// ```
/// body length u32, then the body: kind u32 (2), sequence u64, digest length u32, digest (UTF-8);
/// then the CRC-32 of the length and the body u32
/// ```
///
/// The base limit is the lowest logical size reached since the base was taken: the base's bytes are seen below it
/// only (a store truncated and grown again reads zeros where it never wrote, as a file does).
struct OverlayMap: Sendable {
    /// Which file the base was, as `fstat(2)` saw it (FORMAT.md 16.1): the caller takes it from the base bundle.
    struct BaseIdentity: Equatable, Sendable {
        var device: Int64
        var inode: Int64
        var size: Int64
        /// The modification time, in nanoseconds since 1970.
        var modified: Int64
        /// The status change time, in nanoseconds since 1970.
        var changed: Int64
    }

    /// What the header says: the block size pages are counted in, and the base the overlay lies over.
    struct Header: Equatable, Sendable {
        /// The size of a page of the map, in bytes (a power of two, 512 to 65536): the overlay holds whole pages.
        var pageSize: Int
        var baseIdentity: BaseIdentity
        /// The base's store digest (FORMAT.md 13.1), or its `store.sha256`.
        var baseDigest: String
        /// The base store's size in bytes: the logical size before any record.
        var baseSize: Int64
    }

    /// One acknowledged `xSync`: the pages that became present since the previous record, and the sizes after it.
    struct Record: Equatable, Sendable {
        var sequence: UInt64
        var logicalSize: Int64
        var baseLimit: Int64
        var pages: [Int64]
        /// For a pending-base record (kind 2): the store digest of the bundle a save is about to put in place; the
        /// sizes are then those of the record before it, and no page is named.
        var pendingBase: String? = nil
    }

    static let magic: [UInt8] = Array("MDOVMAP\n".utf8)
    static let version: UInt32 = 1
    /// The record kind that names pages and sizes.
    static let pagesKind: UInt32 = 1
    /// The record kind that names the bundle a save is putting in place.
    static let pendingBaseKind: UInt32 = 2
    /// The longest digest a pending-base record holds (a SHA-256 in hex is 64 bytes).
    static let maximumDigestLength = 1024
    /// The largest logical size a map names: 2⁴⁸ bytes, more than SQLite's largest database (4,294,967,294 pages of
    /// 64 KiB). A page number is below 2⁴⁸ ÷ 512, so that its offset and its end are sums that never overflow; a
    /// record past either never came from SQLite and is read as damaged.
    static let maximumLogicalSize: Int64 = 1 << 48
    /// Bytes of a record around its page numbers: length, kind, sequence, two sizes, count, CRC-32.
    static let recordOverhead = 4 + 4 + 8 + 8 + 8 + 4 + 4

    let header: Header
    /// The good records, in order.
    let records: [Record]
    /// Where the last good record ends: the map's length once recovery cut it back.
    let length: Int

    /// What the overlay is to a bundle whose store has `digest` and `size`: decided from what the map holds (its
    /// header and every record), never from the kind of its last record, nor from the base file's times.
    ///
    /// - The header names that store: the overlay was made over it, and every record is a change to it.
    /// - Otherwise a pending-base record names it (the last such record, whose sizes are that store's): a save put
    ///   that store in place from the overlay as it stood then, and the overlay was not laid over it afterwards (a
    ///   crash, a failed reset, a bundle not served in place). The overlay reads the same over that store as over
    ///   the header's base: a page it holds is read from it either way; any other byte below the base limit was
    ///   the header's base's when the save read it, and the base limit only falls. The records after that one are
    ///   changes the store does not have.
    /// - Otherwise the overlay was made over another store, and its changes are in no bundle known here.
    func coverage(ofStoreDigest digest: String, size: Int64) -> Coverage {
        if header.baseDigest == digest, header.baseSize == size {
            return .madeOver(hasChanges: records.contains { $0.pendingBase == nil })
        }
        guard let index = records.lastIndex(where: { $0.pendingBase == digest && $0.logicalSize == size }) else {
            return .neither
        }
        return .savedInto(hasChanges: records[(index + 1)...].contains { $0.pendingBase == nil })
    }

    /// What a map's overlay is to a bundle's store (``coverage(ofStoreDigest:size:)``).
    enum Coverage: Equatable {
        /// The overlay was made over it; whether any record changed it.
        case madeOver(hasChanges: Bool)
        /// A save put it in place from the overlay; whether a record after that save changed it.
        case savedInto(hasChanges: Bool)
        /// Neither: the overlay's changes were made over another store.
        case neither

        /// Whether the overlay may be laid over that store.
        var isOver: Bool { self != .neither }
        /// Whether the overlay over that store holds changes the store does not have.
        var hasChanges: Bool {
            switch self {
            case .madeOver(let changes), .savedInto(let changes): return changes
            case .neither: return false
            }
        }
    }

    /// Whether any record is a pending base (a save's, whose store may be in place under the document's name).
    var hasPendingBase: Bool { records.contains { $0.pendingBase != nil } }

    /// The header's bytes.
    static func encode(_ header: Header) -> [UInt8] {
        var writer = LittleEndianWriter()
        writer.bytes += magic
        writer.append(version)
        writer.append(UInt32(header.pageSize))
        let identity = header.baseIdentity
        for value in [identity.device, identity.inode, identity.size, identity.modified, identity.changed] {
            writer.append(value)
        }
        writer.append(header.baseSize)
        let digest = Array(header.baseDigest.utf8)
        writer.append(UInt32(digest.count))
        writer.bytes += digest
        var crc = CRC32()
        crc.update(writer.bytes)
        writer.append(crc.value)
        return writer.bytes
    }

    /// A record's bytes.
    static func encode(_ record: Record) -> [UInt8] {
        var writer = LittleEndianWriter()
        if let digest = record.pendingBase.map({ Array($0.utf8) }) {
            writer.append(UInt32(4 + 8 + 4 + digest.count))
            writer.append(pendingBaseKind)
            writer.append(record.sequence)
            writer.append(UInt32(digest.count))
            writer.bytes += digest
            var crc = CRC32()
            crc.update(writer.bytes)
            writer.append(crc.value)
            return writer.bytes
        }
        writer.append(UInt32(recordOverhead - 8 + 8 * record.pages.count))
        writer.append(pagesKind)
        writer.append(record.sequence)
        writer.append(record.logicalSize)
        writer.append(record.baseLimit)
        writer.append(UInt32(record.pages.count))
        for page in record.pages { writer.append(page) }
        var crc = CRC32()
        crc.update(writer.bytes)
        writer.append(crc.value)
        return writer.bytes
    }

    /// Reads a map's bytes: its header, then its records up to the first that is torn, fails its CRC-32, is out of
    /// sequence or describes impossible sizes (it and everything after it was never acknowledged).
    ///
    /// - Throws: ``DocumentError/Code/storeCorrupt`` when the header is damaged or not a map's;
    ///   ``DocumentError/Code/newerFormat`` when a newer version wrote it.
    init(parsing bytes: [UInt8], path: FilePath) throws {
        var reader = LittleEndianReader(bytes: bytes)
        header = try Self.parseHeader(&reader, path: path)
        var records: [Record] = []
        var length = reader.offset
        while let record = Self.parseRecord(&reader, after: records.last, header: header) {
            records.append(record)
            length = reader.offset
        }
        self.records = records
        self.length = length
    }

    /// The header at the reader's position, checked.
    private static func parseHeader(_ reader: inout LittleEndianReader, path: FilePath) throws -> Header {
        func damaged(_ what: String) -> DocumentError {
            DocumentError(.storeCorrupt, path: path,
                          reason: "the working copy's page map \(what); the unsaved changes in it cannot be read")
        }
        guard reader.take(magic.count) == magic else { throw damaged("does not start as a page map does") }
        guard let version = reader.read(UInt32.self) else { throw damaged("is cut short in its header") }
        guard version <= Self.version else {
            throw DocumentError(.newerFormat, path: path,
                                reason: "the working copy's page map was written by a newer version (\(version))")
        }
        guard let pageSize = reader.read(UInt32.self), let device = reader.read(Int64.self),
              let inode = reader.read(Int64.self), let size = reader.read(Int64.self),
              let modified = reader.read(Int64.self), let changed = reader.read(Int64.self),
              let baseSize = reader.read(Int64.self), let digestLength = reader.read(UInt32.self),
              let digest = reader.take(Int(digestLength)) else { throw damaged("is cut short in its header") }
        var crc = CRC32()
        crc.update(Array(reader.bytes[0..<reader.offset]))
        guard reader.read(UInt32.self) == crc.value else { throw damaged("has a header whose CRC-32 does not match") }
        guard version == Self.version, pageSize >= 512, pageSize <= 65_536, pageSize & (pageSize - 1) == 0,
              baseSize >= 0, baseSize <= maximumLogicalSize, let text = String(validating: digest, as: UTF8.self) else {
            throw damaged("has a header with impossible values")
        }
        return Header(pageSize: Int(pageSize),
                      baseIdentity: BaseIdentity(device: device, inode: inode, size: size, modified: modified,
                                                 changed: changed),
                      baseDigest: text, baseSize: baseSize)
    }

    /// The record at the reader's position when it is whole, checked and next in sequence; `nil` otherwise (the
    /// reader then stands anywhere).
    private static func parseRecord(_ reader: inout LittleEndianReader, after previous: Record?,
                                    header: Header) -> Record? {
        let start = reader.offset
        guard let length = reader.read(UInt32.self), Int(length) >= 4 + 8, let body = reader.take(Int(length)),
              let checksum = reader.read(UInt32.self) else { return nil }
        var crc = CRC32()
        crc.update(Array(reader.bytes[start..<(start + 4 + Int(length))]))
        guard crc.value == checksum else { return nil }
        var fields = LittleEndianReader(bytes: body)
        let sequence = previous?.sequence ?? 0
        guard let kind = fields.read(UInt32.self), let number = fields.read(UInt64.self), number == sequence + 1
        else { return nil }
        switch kind {
        case pagesKind: return parsePages(&fields, sequence: number, bodyLength: body.count)
        case pendingBaseKind:
            // > A pending base changes no size: the record keeps those of the one before it.
            guard let count = fields.read(UInt32.self), Int(count) <= maximumDigestLength,
                  Int(count) == body.count - 16, let digest = fields.take(Int(count)),
                  let text = String(validating: digest, as: UTF8.self) else { return nil }
            return Record(sequence: number, logicalSize: previous?.logicalSize ?? header.baseSize,
                          baseLimit: previous?.baseLimit ?? header.baseSize, pages: [], pendingBase: text)
        default: return nil
        }
    }

    /// The rest of a pages record (kind 1) after its kind and sequence, checked; `nil` when it is impossible.
    private static func parsePages(_ fields: inout LittleEndianReader, sequence: UInt64, bodyLength: Int) -> Record? {
        guard bodyLength >= recordOverhead - 8, (bodyLength - (recordOverhead - 8)) % 8 == 0,
              let logicalSize = fields.read(Int64.self), let baseLimit = fields.read(Int64.self),
              let count = fields.read(UInt32.self), Int(count) * 8 == bodyLength - (recordOverhead - 8),
              logicalSize >= 0, logicalSize <= maximumLogicalSize, baseLimit >= 0, baseLimit <= logicalSize
        else { return nil }
        var pages: [Int64] = []
        pages.reserveCapacity(Int(count))
        for _ in 0..<count {
            guard let page = fields.read(Int64.self), page >= 0, page < maximumLogicalSize / 512 else { return nil }
            pages.append(page)
        }
        return Record(sequence: sequence, logicalSize: logicalSize, baseLimit: baseLimit, pages: pages)
    }
}

extension OverlayMap.BaseIdentity {
    /// The identity `fstat(2)` gave a file (``FileIdentity``), as the map's header stores it.
    init(_ identity: FileIdentity) {
        self.init(device: Int64(bitPattern: identity.device), inode: Int64(bitPattern: identity.inode),
                  size: identity.size,
                  modified: Int64(identity.modified.tv_sec) * 1_000_000_000 + Int64(identity.modified.tv_nsec),
                  changed: Int64(identity.changed.tv_sec) * 1_000_000_000 + Int64(identity.changed.tv_nsec))
    }
}

/// Appends little-endian integers to a byte array.
private struct LittleEndianWriter {
    var bytes: [UInt8] = []

    /// Appends `value`'s bytes, least significant first.
    mutating func append<Value: FixedWidthInteger>(_ value: Value) {
        withUnsafeBytes(of: value.littleEndian) { bytes += $0 }
    }
}

/// Reads little-endian integers from a byte array, front to back; `nil` past its end.
private struct LittleEndianReader {
    let bytes: [UInt8]
    var offset = 0

    /// The next `count` bytes, or `nil` (the position unchanged) when fewer are left.
    mutating func take(_ count: Int) -> [UInt8]? {
        guard count >= 0, count <= bytes.count - offset else { return nil }
        defer { offset += count }
        return Array(bytes[offset..<(offset + count)])
    }

    /// The next integer of `type`, or `nil` when too few bytes are left.
    mutating func read<Value: FixedWidthInteger>(_ type: Value.Type) -> Value? {
        guard let raw = take(MemoryLayout<Value>.size) else { return nil }
        var value = Value.zero
        for (index, byte) in raw.enumerated() { value |= Value(truncatingIfNeeded: byte) << (8 * index) }
        return value
    }
}
