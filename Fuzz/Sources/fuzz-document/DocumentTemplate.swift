import Foundation
import GRDB
@_spi(Core) import MDZCore
@testable import ManagedDocument
import SystemPackage

/// A valid bundle taken apart once, at startup: every entry but `DocumentMetadata.json` kept byte for byte (its
/// local header, data and data descriptor, and its directory record), and the metadata as a ``JSONTree`` to edit.
/// ``bundle(metadata:)`` lays the kept entries out again and appends the given metadata as a stored entry, with its
/// CRC-32 and sizes right, so the reader always gets past the zip layer to the metadata's values.
struct DocumentTemplate: @unchecked Sendable {  // ZipCentralRecord is a plain value; made once, then only read
    let name: String
    /// The metadata the writer wrote, dates and document ID fixed so a saved input means the same in every run.
    let metadata: JSONTree
    /// The store's bytes, for digests made to match an edited segment interval.
    let store: [UInt8]
    /// Every entry but the metadata, in file order (`mimetype` first).
    private let entries: [(record: ZipCentralRecord, bytes: [UInt8])]
    private let metadataRecord: ZipCentralRecord

    /// The bundle with `json` as its `DocumentMetadata.json`, written last and stored.
    func bundle(metadata json: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        var records: [ZipCentralRecord] = []
        for entry in entries {
            var record = entry.record
            record.localHeaderOffset = UInt64(out.count)
            records.append(record)
            out += entry.bytes
        }
        var crc = CRC32()
        crc.update(json)
        var record = metadataRecord
        record.localHeaderOffset = UInt64(out.count)
        record.method = 0
        record.flags &= 0x0800  // keeps only the UTF-8 flag: no data descriptor
        record.versionNeeded = 10
        record.crc32 = crc.value
        record.compressedSize = UInt64(json.count)
        record.uncompressedSize = UInt64(json.count)
        record.extraFields = []
        records.append(record)
        out += ZipLocalHeader.encodeStored(name: record.name, content: json, crc32: crc.value,
                                           time: record.modificationTime, date: record.modificationDate)
        let directoryOffset = UInt64(out.count)
        var directory: [UInt8] = []
        for record in records { directory += record.encoded() }
        out += directory
        out += ZipEndRecord.encode(entryCount: UInt64(records.count), directorySize: UInt64(directory.count),
                                   directoryOffset: directoryOffset)
        return out
    }

    /// Takes apart the bundle at `path`, whose store is `store`.
    init(name: String, bundle path: FilePath, store: FilePath) throws {
        let bytes = try Self.bytes(of: path)
        let end = try ZipEndRecord.locate(fileSize: UInt64(bytes.count)) { offset, count in
            let start = min(Int(offset), bytes.count)
            return Array(bytes[start..<min(start + count, bytes.count)])
        }
        let directoryStart = Int(end.directoryOffset)
        let directory = Array(bytes[directoryStart..<directoryStart + Int(end.directorySize)])
        let records = try ZipCentralDirectory.decode(directory, count: end.entryCount).records
            .sorted { $0.localHeaderOffset < $1.localHeaderOffset }
        var entries: [(record: ZipCentralRecord, bytes: [UInt8])] = []
        var metadataRecord: ZipCentralRecord?
        for (index, record) in records.enumerated() {
            let next = index + 1 < records.count ? Int(records[index + 1].localHeaderOffset) : directoryStart
            if record.name == Array(BundleLayout.metadata.utf8) {
                metadataRecord = record
            } else {
                entries.append((record, Array(bytes[Int(record.localHeaderOffset)..<next])))
            }
        }
        guard let metadataRecord, entries.first?.record.name == Array(BundleLayout.mimetype.utf8) else {
            preconditionFailure("\(path): the writer's bundle has no metadata entry, or does not start with mimetype")
        }
        // > The metadata with the values that change from run to run fixed, so an input replays the same.
        var metadata = try BundleReader(at: path).metadata
        metadata.modifiedAt = metadata.createdAt
        guard let tree = JSONTree(parsing: try metadata.encoded()) else {
            preconditionFailure("the metadata encoder wrote text this parser does not read")
        }
        self.name = name
        self.metadata = tree
        self.store = try Self.bytes(of: store)
        self.entries = entries
        self.metadataRecord = metadataRecord
    }

    private static func bytes(of path: FilePath) throws -> [UInt8] {
        let descriptor = try FileDescriptor.open(path, .readOnly)
        defer { try? descriptor.close() }  // Squash close error of a read-only descriptor.
        let size = Int(try descriptor.seek(offset: 0, from: .end))
        var bytes = [UInt8](repeating: 0, count: size)
        let read = try bytes.withUnsafeMutableBytes { try descriptor.read(fromAbsoluteOffset: 0, into: $0) }
        precondition(read == size, "\(path) changed while it was read")
        return bytes
    }
}

extension DocumentTemplate {
    /// The templates the fuzzer edits, written by the library into `folder` (removed afterwards):
    /// 0. a small store, deflated, with an additional file, a model with a migration and some `userInfo`;
    /// 1. the same store, stored;
    /// 2. a store over 1 MiB, deflated: a restart index and several segment digests (the segment arithmetic);
    /// 3. the same store, stored: several segment digests, read in place without inflating.
    static func makeAll(in folder: FilePath) throws -> [DocumentTemplate] {
        try FileSystem.createDirectory(folder)
        defer { try? FileSystem.removeTree(folder) }  // Squash cleanup error: the templates are in memory.
        let small = try makeStore(at: folder.appending("small.sqlite"), rows: 40, blobSize: 64)
        let large = try makeStore(at: folder.appending("large.sqlite"), rows: 2_000, blobSize: 400)
        let additional = folder.appending("additional")
        try FileSystem.createDirectory(additional)
        try Data("a note beside the store\n".utf8).write(to: URL(fileURLWithPath: additional.appending("note.txt").string))

        let created = Date(timeIntervalSince1970: 1_790_000_000.125)
        guard let documentID = UUID(uuidString: "5E1D0C3B-7A4F-4C2E-9B61-0F8D2A6C4E11") else {
            preconditionFailure("the template's document ID is not a UUID")
        }
        var rich = DocumentMetadata(documentID: documentID, createdAt: created, userInfo: [
            "title": .string("Notes"), "pages": .number(12), "ratio": .number(0.75), "tags": .array([.string("a")]),
            "flag": .bool(true), "nothing": .null,
        ])
        rich.model = DocumentMetadata.Model(name: "Notes", version: "1.2", compatibilityLevel: 1, migrations: [
            DocumentMetadata.AppliedMigration(identifier: "2026-01-create-note", checksum: String(repeating: "ab", count: 32),
                                              appliedAt: created),
        ])
        let plain = DocumentMetadata(documentID: documentID, createdAt: created)

        var options = WritingOptions()
        options.modificationTime = created
        var stored = options
        stored.compression = .store
        let plans: [(String, BundleContent, DocumentMetadata, WritingOptions, FilePath)] = [
            ("small-deflated", BundleContent(store: small, additionalContent: additional), rich, options, small),
            ("small-stored", BundleContent(store: small), plain, stored, small),
            ("large-deflated", BundleContent(store: large), plain, options, large),
            ("large-stored", BundleContent(store: large), plain, stored, large),
        ]
        return try plans.map { name, content, metadata, options, store in
            let bundle = folder.appending("\(name).mdz")
            let written = try BundleWriter.write(content, metadata: metadata, to: bundle, options: options)
            if name.hasPrefix("large") {
                precondition((written.store.segments?.count ?? 0) > 4, "\(name) has too few segment digests")
                precondition(name.hasSuffix("stored") || written.store.deflateRestarts != nil,
                             "\(name) has no restart index")
            }
            return try DocumentTemplate(name: name, bundle: bundle, store: store)
        }
    }

    /// A store of `rows` rows of pseudo-random blobs and text in two tables with an index, the same in every run.
    private static func makeStore(at path: FilePath, rows: Int, blobSize: Int) throws -> FilePath {
        let queue = try DatabaseQueue(path: path.string)
        try queue.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA journal_mode = DELETE")
            try db.execute(sql: "PRAGMA user_version = 3")
            try db.execute(sql: """
                CREATE TABLE note(id INTEGER PRIMARY KEY, title TEXT NOT NULL, body TEXT, score REAL, payload BLOB);
                CREATE TABLE tag(id INTEGER PRIMARY KEY, name TEXT UNIQUE, noteID INTEGER REFERENCES note(id));
                CREATE INDEX note_title ON note(title);
                """)
        }
        var state: UInt64 = 0x5EED
        func next() -> UInt64 {  // SplitMix64
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        try queue.write { db in
            for index in 0..<rows {
                let payload = Data((0..<blobSize).map { _ in UInt8(truncatingIfNeeded: next()) })
                try db.execute(sql: "INSERT INTO note(title, body, score, payload) VALUES (?, ?, ?, ?)",
                               arguments: ["Title \(index) — ünïcødé", String(repeating: "body \(index) ", count: 8),
                                           Double(index) / 7, payload])
                if index % 10 == 0 {
                    try db.execute(sql: "INSERT INTO tag(name, noteID) VALUES (?, ?)", arguments: ["tag\(index)", index + 1])
                }
            }
        }
        try queue.close()
        return path
    }
}
