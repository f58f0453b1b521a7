import Foundation
import GRDB
import ManagedDocument
import SystemPackage
import TestSupport
import Testing

/// Bundles in format version 1, written by the last revision that wrote it (`Tests/Fixtures/format-1`): read by
/// their own rules (`store.sha256`), verified, served in place, and saved as version 3 (FORMAT.md 13.2), from the
/// public API only.
@Suite("Format version 1 bundles from an earlier release: read, verified, and saved as version 3")
struct FormatVersion1Tests {
    static let fixtures = FilePath(#filePath).removingLastComponent().removingLastComponent()
        .appending("Fixtures").appending("format-1")

    @Test("each opens as version 1, verifies, reads in place, and its first save writes version 3 row for row",
          arguments: ["small.mdz", "large.mdz", "stored.mdz"])
    func savedAsVersion2(name: String) async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending(name)
            try FileManager.default.copyItem(atPath: Self.fixtures.appending(name).string, toPath: bundle.string)
            let old = try BundleReader(at: bundle)
            #expect(old.metadata.formatVersion == 1)
            #expect(old.metadata.store.sha256 != nil && old.metadata.store.digest == nil)
            #expect(old.metadata.store.contentDigest == old.metadata.store.sha256)
            _ = try old.verify(full: true, workingDirectory: folder)
            let store = try BundleStore(at: bundle)
            #expect(store.access == .segments, "read in place: \(store.reason ?? "")")
            let inPlace = try store.read { db in try StoreContent(db) }
            store.close()

            // The model: the store extracted by version 1's rules, changed by SQLite directly.
            let model = folder.appending("model.sqlite")
            _ = try old.extractStore(to: model)
            let queue = try DatabaseQueue(path: model.string)
            try await queue.write { db in try db.execute(sql: "UPDATE note SET title = 'changed' WHERE id = 7") }
            let expected = try await queue.read { db in try StoreContent(db) }
            try queue.close()

            let document = try await Document.open(at: bundle, options: appOptions(folder))
            #expect(try await document.reader.read { db in try StoreContent(db) } == inPlace)
            try await document.writer.write { db in try db.execute(sql: "UPDATE note SET title = 'changed' WHERE id = 7") }
            try await document.save()
            let report = document.lastSave
            try await document.close()
            if name == "large.mdz" {
                // > A version 1 bundle records no CRC-32C of its compressed segments: its first save is whole.
                #expect(report?.mode == .full && report?.reason?.contains("CRC-32C") == true,
                        "\(String(describing: report))")
            }

            let saved = try BundleReader(at: bundle)
            #expect(saved.metadata.formatVersion == 3)
            #expect(saved.metadata.store.sha256 == nil && saved.metadata.store.digest?.count == 64)
            #expect(saved.metadata.store.segments != nil)
            #expect(saved.metadata.documentID == old.metadata.documentID)
            _ = try saved.verify(full: true, workingDirectory: folder)
            #expect(try await bundleContent(bundle, folder: folder) == expected)
            let unzip = try execute("unzip", ["-tq", bundle.string])
            #expect(unzip.status == 0, "\(unzip.stdout)\(unzip.stderr)")
        }
    }

    @Test("a damaged version 1 store is refused when extracted, and by its segment when read in place")
    func damagedVersion1() async throws {
        try await withTemporaryDirectory { folder in
            let source = Self.fixtures.appending("large.mdz")
            let restarts = try #require(try BundleReader(at: source).metadata.store.deflateRestarts)
            var bytes = Array(try Data(contentsOf: URL(fileURLWithPath: source.string)))
            // > Inside restart segment 4's compressed bytes: the stream there decodes to other bytes or not at all.
            bytes[try Self.dataOffset(of: source) + Int(restarts.offsets[4]) + 40] ^= 0x01
            let bundle = folder.appending("damaged.mdz")
            try Data(bytes).write(to: URL(fileURLWithPath: bundle.string))
            let reader = try BundleReader(at: bundle)
            let error = #expect(throws: DocumentError.self) { try reader.extract(into: folder.appending("out")) }
            #expect([.checksumMismatch, .corruptArchive, .sizeMismatch].contains(error?.code), "\(String(describing: error))")
            let store = try BundleStore(at: bundle)
            defer { store.close() }
            let read = #expect(throws: DocumentError.self) {
                _ = try store.read { db in try Int.fetchOne(db, sql: "SELECT sum(length(body)) FROM note") }
            }
            #expect(read?.reason.contains("segment 4 ") == true, "\(String(describing: read))")
        }
    }

    /// Where the store entry's data starts, from its local header (python's zipfile, independent of this package).
    static func dataOffset(of bundle: FilePath) throws -> Int {
        let text = try Python.run("""
            import struct, sys, zipfile
            info = zipfile.ZipFile(sys.argv[1]).getinfo('StoreContent/persistentStore')
            with open(sys.argv[1], 'rb') as f:
                f.seek(info.header_offset)
                header = f.read(30)
            name, extra = struct.unpack('<HH', header[26:30])
            print(info.header_offset + 30 + name + extra)
            """, [bundle.string])
        return Int(text.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
    }
}
