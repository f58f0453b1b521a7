import Crypto
import Foundation
import GRDB
import SystemPackage
import TestSupport
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

/// Damaged and hostile bundles made in code, for tests only.
///
/// Two ways in: take a good bundle apart with ``Archive``, patch its local headers, payloads and directory records,
/// and lay it out again (offsets, lengths and end records recomputed); or write entries of your choice through the
/// library's own ``ArchiveWriter`` with ``writeArchive(at:mediaType:entries:deflateLevel:)``, using ``Parts`` to get
/// a store and metadata that are right in every respect but the one a test breaks.
enum ZipSurgery {
    // MARK: Taking a zip apart and putting it back together

    /// A zip archive taken apart: every entry's local header, name, extra field and payload, and its directory
    /// record. ``encoded(editingDirectory:)`` lays the entries out again in order.
    struct Archive {
        struct Entry {
            /// The 30 fixed bytes of the local header (the name and extra lengths are rewritten on encoding).
            var localHeader: [UInt8]
            var localName: [UInt8]
            var localExtra: [UInt8]
            /// Everything from the end of the local header to the next entry: data and data descriptor.
            var payload: [UInt8]
            /// The central-directory record (its local-header offset is rewritten on encoding).
            var record: ZipCentralRecord

            var name: String { String(decoding: record.name, as: UTF8.self) }

            var localFlags: UInt16 {
                get { localHeader.readLE16(at: 6) }
                set { localHeader.writeLE(newValue, at: 6) }
            }
            var localMethod: UInt16 {
                get { localHeader.readLE16(at: 8) }
                set { localHeader.writeLE(newValue, at: 8) }
            }
            var localCRC32: UInt32 {
                get { localHeader.readLE32(at: 14) }
                set { localHeader.writeLE(newValue, at: 14) }
            }
            var localCompressedSize: UInt32 {
                get { localHeader.readLE32(at: 18) }
                set { localHeader.writeLE(newValue, at: 18) }
            }
            var localUncompressedSize: UInt32 {
                get { localHeader.readLE32(at: 22) }
                set { localHeader.writeLE(newValue, at: 22) }
            }

            /// Renames the entry in its local header and its directory record.
            mutating func rename(to raw: [UInt8]) {
                localName = raw
                record.name = raw
            }

            /// Sets the Unix file type and permissions (`st_mode`) in the record's external attributes.
            mutating func setUnixMode(_ mode: UInt32) {
                record.versionMadeBy = 0x031E  // Unix, APPNOTE 3.0
                record.externalAttributes = mode << 16
            }
        }

        /// The entries, in file order.
        var entries: [Entry]
        /// Whether the re-encoded directory and end records use zip64 fields.
        var forcesZIP64 = false

        init(_ bytes: [UInt8]) throws {
            let end = try ZipEndRecord.locate(fileSize: UInt64(bytes.count)) { offset, count in
                let start = min(Int(offset), bytes.count)
                return Array(bytes[start..<min(start + count, bytes.count)])
            }
            let directoryStart = Int(end.directoryOffset)
            let directory = Array(bytes[directoryStart..<directoryStart + Int(end.directorySize)])
            let records = try ZipCentralDirectory.decode(directory, count: end.entryCount).records
                .sorted { $0.localHeaderOffset < $1.localHeaderOffset }
            forcesZIP64 = end.isZIP64
            entries = []
            for (index, record) in records.enumerated() {
                let offset = Int(record.localHeaderOffset)
                let header = Array(bytes[offset..<offset + ZipLocalHeader.fixedSize])
                let nameLength = Int(header.readLE16(at: 26))
                let extraLength = Int(header.readLE16(at: 28))
                let nameStart = offset + ZipLocalHeader.fixedSize
                let dataStart = nameStart + nameLength + extraLength
                let next = index + 1 < records.count ? Int(records[index + 1].localHeaderOffset) : directoryStart
                entries.append(Entry(localHeader: header,
                                     localName: Array(bytes[nameStart..<nameStart + nameLength]),
                                     localExtra: Array(bytes[nameStart + nameLength..<dataStart]),
                                     payload: Array(bytes[dataStart..<next]), record: record))
            }
        }

        init(contentsOf path: FilePath) throws {
            try self.init(try Fixtures.bytes(of: path))
        }

        /// The index of the entry with this name.
        func index(of name: String) -> Int {
            guard let index = entries.firstIndex(where: { $0.record.name == Array(name.utf8) }) else {
                preconditionFailure("the archive has no entry named \(name): \(entries.map(\.name))")
            }
            return index
        }

        /// Edits the entry with this name in place.
        mutating func modify(_ name: String, _ body: (inout Entry) -> Void) {
            body(&entries[index(of: name)])
        }

        /// Lays the entries out in order, then writes the directory (in the same order) and the end records.
        ///
        /// - Parameter editDirectory: a last change to the directory records, after their offsets are set
        ///   (records added here point wherever the test wants; the end record counts them).
        /// - Parameter hiddenRecords: how many of the last directory records the end record leaves out of its count
        ///   (the directory's size still covers them), for readers that count and readers that scan.
        func encoded(editingDirectory editDirectory: (inout [ZipCentralRecord]) -> Void = { _ in },
                     hiddenRecords: Int = 0) -> [UInt8] {
            var out: [UInt8] = []
            var records: [ZipCentralRecord] = []
            for entry in entries {
                var header = entry.localHeader
                header.writeLE(UInt16(entry.localName.count), at: 26)
                header.writeLE(UInt16(entry.localExtra.count), at: 28)
                var record = entry.record
                record.localHeaderOffset = UInt64(out.count)
                records.append(record)
                out += header + entry.localName + entry.localExtra + entry.payload
            }
            editDirectory(&records)
            let directoryOffset = UInt64(out.count)
            var directory: [UInt8] = []
            for record in records { directory += record.encoded(forcesZIP64: forcesZIP64) }
            out += directory
            out += ZipEndRecord.encode(entryCount: UInt64(records.count - hiddenRecords),
                                       directorySize: UInt64(directory.count), directoryOffset: directoryOffset,
                                       forcesZIP64: forcesZIP64)
            return out
        }

        func write(to path: FilePath, editingDirectory editDirectory: (inout [ZipCentralRecord]) -> Void = { _ in },
                   hiddenRecords: Int = 0) throws {
            try Fixtures.write(encoded(editingDirectory: editDirectory, hiddenRecords: hiddenRecords), to: path)
        }
    }

    /// Takes the bundle at `path` apart, lets `body` change it, and writes it back in place.
    static func edit(_ path: FilePath, editingDirectory: (inout [ZipCentralRecord]) -> Void = { _ in },
                     hiddenRecords: Int = 0, _ body: (inout Archive) throws -> Void) throws {
        var archive = try Archive(contentsOf: path)
        try body(&archive)
        try archive.write(to: path, editingDirectory: editingDirectory, hiddenRecords: hiddenRecords)
    }

    /// A raw deflate stream holding `bytes` in one stored block (RFC 1951, 3.2.4): what "deflated" data looks like
    /// when the test does not care how well it compresses.
    static func deflateStoredBlock(_ bytes: [UInt8]) -> [UInt8] {
        precondition(bytes.count <= 0xFFFF, "one stored block holds at most 65,535 bytes")
        let length = UInt16(bytes.count)
        var out: [UInt8] = [0x01]  // BFINAL = 1, BTYPE = 00 (stored)
        out.appendLE(length)
        out.appendLE(~length)
        return out + bytes
    }

    // MARK: Writing entries of the test's choice through ArchiveWriter

    /// What an entry written by ``writeArchive(at:mediaType:entries:deflateLevel:)`` holds.
    enum Content {
        case bytes([UInt8])
        /// `count` zero bytes, produced as they are written (never held in memory).
        case zeros(Int)
    }

    struct Item {
        var name: String
        var content: Content
        var compressed: Bool

        init(_ name: String, _ bytes: [UInt8], compressed: Bool = true) {
            self.name = name
            self.content = .bytes(bytes)
            self.compressed = compressed
        }

        init(_ name: String, zeros count: Int, compressed: Bool = true) {
            self.name = name
            self.content = .zeros(count)
            self.compressed = compressed
        }
    }

    /// Writes a zip through the library's writer: the bare `mimetype` entry holding `mediaType` first, then
    /// `entries` exactly as given (names are not checked against the format).
    static func writeArchive(at path: FilePath, mediaType: String = BundleLayout.defaultMediaType, entries: [Item],
                             deflateLevel: Int = 6) throws {
        let descriptor = try FileDescriptor.open(path, .readWrite, options: [.create, .truncate],
                                                 permissions: [.ownerReadWrite, .groupRead, .otherRead])
        defer { try? descriptor.close() }  // Squash close error of a test fixture.
        let writer = try ArchiveWriter(descriptor: descriptor, path: path, mediaType: mediaType,
                                       deflateLevel: deflateLevel, modificationTime: 1_700_000_000)
        for item in entries {
            switch item.content {
            case .bytes(let bytes):
                try writer.addEntry(named: item.name, bytes: bytes, compressed: item.compressed)
            case .zeros(let count):
                var remaining = count
                try writer.addEntry(named: item.name, size: Int64(count), compressed: item.compressed) { buffer in
                    let chunk = min(remaining, buffer.count)
                    buffer.baseAddress!.initializeMemory(as: UInt8.self, repeating: 0, count: chunk)
                    remaining -= chunk
                    return chunk
                }
            }
        }
        try writer.finish()
    }

    /// The pieces of a good format version 2 bundle, in memory: a real store, additional files and metadata that
    /// describes them.
    /// Tests break one thing and write the rest as it is with
    /// ``writeBundle(at:parts:mediaType:compressed:metadata:)``.
    struct Parts {
        var store: [UInt8]
        var additional: [(name: String, bytes: [UInt8])] = []
        var metadata: DocumentMetadata

        /// Replaces the store's bytes, keeping the metadata's size and digests true to them (the SQLite facts stay).
        mutating func replaceStore(_ bytes: [UInt8]) {
            store = bytes
            metadata.store.size = Int64(bytes.count)
            if metadata.formatVersion < 2 {
                metadata.store.sha256 = ZipSurgery.sha256(bytes)
            } else {
                metadata.store.segments = ZipSurgery.segments(of: bytes)
                reseal()
            }
        }

        /// The same parts as a format version 1 writer would describe them: `store.sha256` of the store's bytes, no
        /// store digest, and segment digests only when `keepingSegments` (they were optional then).
        func asVersion1(keepingSegments: Bool) -> Parts {
            var parts = self
            parts.metadata.formatVersion = 1
            parts.metadata.store.digest = nil
            parts.metadata.store.sha256 = ZipSurgery.sha256(store)
            if !keepingSegments { parts.metadata.store.segments = nil }
            return parts
        }

        /// Computes `store.digest` again from the metadata's own size and segment digests (FORMAT.md 13.1), as a
        /// writer would after changing them.
        mutating func reseal() {
            metadata.store.digest = metadata.store.segments?.storeDigest(size: metadata.store.size)
        }

        /// Adds an `AdditionalContent/` (or any) entry, listed truthfully in the metadata.
        mutating func add(_ name: String, _ bytes: [UInt8]) {
            additional.append((name, bytes))
            metadata.entries.append(DocumentMetadata.Entry(name: name, size: Int64(bytes.count), sha256: sha256(bytes)))
            metadata.entries.sort { $0.name < $1.name }
        }

        /// The metadata as the writer encodes it.
        func metadataJSON() throws -> [UInt8] { try metadata.encoded() }

        /// The metadata as a JSON object edited by `body` (for keys the Codable type cannot leave out or mistype).
        func metadataJSON(editing body: (inout [String: Any]) -> Void) throws -> [UInt8] {
            guard var object = try JSONSerialization.jsonObject(with: Data(metadata.encoded())) as? [String: Any]
            else { preconditionFailure("the metadata does not encode as a JSON object") }
            body(&object)
            return Array(try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]))
        }
    }

    /// A store of `rows` rows, made in a private folder inside `scratch` that is removed before returning, and
    /// metadata true to it.
    static func makeParts(in scratch: FilePath, rows: Int = 50) throws -> Parts {
        let work = scratch.appending(".parts-\(UUID().uuidString)")
        try FileManager.default.createDirectory(atPath: work.string, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: work.string) }  // Squash cleanup error.
        let path = try Fixtures.makeStore(at: work.appending("store.sqlite"), rows: rows)
        let queue = try StoreInspector.openReadOnly(path)
        let facts = try queue.read { try StoreInspector.facts($0, countingRows: false) }
        try queue.close()
        let bytes = try Fixtures.bytes(of: path)
        var metadata = DocumentMetadata()
        // > Parts are a version 2 bundle (its records in the metadata); `Version3Parts` makes version 3 from them.
        metadata.formatVersion = 2
        let segments = segments(of: bytes)
        metadata.store = DocumentMetadata.Store(
            entry: BundleLayout.store, size: Int64(bytes.count), pageSize: facts.pageSize,
            userVersion: facts.userVersion, applicationID: facts.applicationID,
            schemaFingerprint: facts.schemaFingerprint)
        metadata.store.digest = Fixtures.storeDigest(of: bytes, interval: segments.interval)
        metadata.store.segments = segments
        return Parts(store: bytes, metadata: metadata)
    }

    /// The segment digests of `bytes` at 64 KiB (the smallest interval), so that even a small store has several.
    static func segments(of bytes: [UInt8], interval: Int = 65_536) -> DocumentMetadata.SegmentDigests {
        let digests = stride(from: 0, to: bytes.count, by: interval).map {
            sha256(Array(bytes[$0..<min(bytes.count, $0 + interval)]))
        }
        return DocumentMetadata.SegmentDigests(interval: Int64(interval), digests: digests)
    }

    /// Writes `parts` as a bundle: the store, the additional files, then the metadata (`metadata` bytes when
    /// given, else the parts' metadata encoded), all through ``ArchiveWriter``.
    static func writeBundle(at path: FilePath, parts: Parts, mediaType: String = BundleLayout.defaultMediaType,
                            compressed: Bool = true, metadata: [UInt8]? = nil) throws {
        var items = [Item(BundleLayout.store, parts.store, compressed: compressed)]
        for file in parts.additional { items.append(Item(file.name, file.bytes, compressed: compressed)) }
        items.append(Item(BundleLayout.metadata, try metadata ?? parts.metadataJSON(), compressed: compressed))
        try writeArchive(at: path, mediaType: mediaType, entries: items)
    }

    static func sha256(_ bytes: [UInt8]) -> String {
        SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
    }
}

