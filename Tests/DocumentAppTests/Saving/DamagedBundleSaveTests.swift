// A save reuses no compressed byte it has not proven good: a segment damaged in the bundle since it was written (never
// read by the open, which serves the store in place) fails the save with the segment named, and the file stays as it
// was; a bundle that records no CRC-32C of its segments (an earlier release's) is saved whole once.
import Foundation
import GRDB
import ManagedDocument
import SystemPackage
import Testing
import TestSupport

/// Flips one byte in the middle of the store's restart segment `count / 2` (python's zipfile finds the entry's data,
/// and the restart points in the metadata, format version 2, or the store index, version 3); prints that segment's
/// index.
private let flipMiddleSegment = """
    import json, struct, sys, zipfile
    path = sys.argv[1]
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo('StoreContent/persistentStore')
        metadata = json.loads(archive.read('DocumentMetadata.json'))
        if metadata['formatVersion'] >= 3:
            index = archive.read('StoreContent/persistentStore.index')
            count = struct.unpack_from('<Q', index, 32)[0]
            offsets = [struct.unpack_from('<Q', index, 64 + 48 * i + 32)[0] for i in range(count)]
        else:
            offsets = metadata['store']['deflateRestarts']['offsets']
    index = len(offsets) // 2
    with open(path, 'r+b') as file:
        file.seek(info.header_offset)
        header = file.read(30)
        name, extra = struct.unpack('<HH', header[26:30])
        data = info.header_offset + 30 + name + extra
        position = data + (offsets[index] + offsets[index + 1]) // 2
        file.seek(position)
        byte = file.read(1)[0]
        file.seek(position)
        file.write(bytes([byte ^ 0x5A]))
    print(index)
    """

/// Makes a document of about 12 MiB (some 90 restart segments) at `bundle`, saved and closed, in format `version`.
private func makeLargeDocument(_ bundle: FilePath, folder: FilePath, version: Int = 3) async throws {
    var options = appOptions(folder)
    options.saving.formatVersion = version
    try await Document.withDocument(at: bundle, options: options) { document in
        try await document.writer.write { db in
            try db.execute(sql: "CREATE TABLE t(id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
            try db.execute(sql: """
                WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 12000)
                INSERT INTO t SELECT i, printf('%d %s', i, replace(hex(zeroblob(500)), '0', char(65 + i % 26, 97 + i % 7))) FROM r
                """)
        }
    }
}

@Suite("A save reuses no compressed byte it has not proven good")
struct DamagedBundleSaveTests {
    @Test("a byte flipped in the middle of the bundle's store: the open and the writes work, the save fails naming the segment, the file is as it was")
    func damagedSegment() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Big.mdz")
            try await makeLargeDocument(bundle, folder: folder)
            let index = try #require(Int(try Python.run(flipMiddleSegment, [bundle.string]).trimmingCharacters(in: .whitespacesAndNewlines)))
            let damaged = try Data(contentsOf: URL(fileURLWithPath: bundle.string))

            let document = try await Document.open(at: bundle, options: appOptions(folder))
            try await document.writer.write { db in
                for id in 20_001...20_005 { try db.execute(sql: "INSERT INTO t VALUES (?, 'new')", arguments: [id]) }
            }
            let error = await #expect(throws: DocumentError.self) { try await document.save() }
            #expect(error?.code == .checksumMismatch, "\(String(describing: error))")
            #expect(error?.path == bundle)
            #expect(error?.reason.contains("restart segment \(index) ") == true, "\(String(describing: error))")
            #expect(document.state == .savingFailed)
            #expect(try Data(contentsOf: URL(fileURLWithPath: bundle.string)) == damaged, "the bundle is as it was")
            #expect(try await document.reader.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM t WHERE id > 20000") } == 5)
            try await document.close(savingChanges: false)
            #expect(try Data(contentsOf: URL(fileURLWithPath: bundle.string)) == damaged)
        }
    }

    @Test("every restart segment's compressed bytes carry a CRC-32C, and verification names a segment whose bytes changed")
    func recordedAndVerified() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Big.mdz")
            try await makeLargeDocument(bundle, folder: folder)
            let restarts = try #require(try Document.metadata(at: bundle).store.deflateRestarts)
            #expect(restarts.compressedCRC32Cs?.utf8.count == restarts.offsets.count * 8)
            let index = try #require(Int(try Python.run(flipMiddleSegment, [bundle.string]).trimmingCharacters(in: .whitespacesAndNewlines)))
            let error = #expect(throws: DocumentError.self) {
                _ = try BundleReader(at: bundle).verify(full: true, workingDirectory: folder)
            }
            #expect(error?.code == .checksumMismatch, "\(String(describing: error))")
            #expect(error?.reason.contains("segment \(index)") == true, "\(String(describing: error))")
        }
    }

    @Test("a bundle without CRC-32Cs (an earlier release's): its first save is whole and records them, the next copies what did not change")
    func earlierReleaseBundle() async throws {
        try await withTemporaryDirectory { folder in
            let written = folder.appending("Written.mdz")
            // > Version 2 (the earlier release's format): its metadata holds the restart points a test can strip.
            try await makeLargeDocument(written, folder: folder, version: 2)
            let bundle = folder.appending("Big.mdz")
            try Python.rewritingMetadata(of: written.string, to: bundle.string,
                                         [("store.deflateRestarts.compressedCRC32Cs", "null")])
            #expect(try Document.metadata(at: bundle).store.deflateRestarts?.compressedCRC32Cs == nil)
            let document = try await Document.open(at: bundle, options: appOptions(folder))
            for round in 1...2 {
                try await document.writer.write { db in
                    try db.execute(sql: "UPDATE t SET body = 'round \(round)' WHERE id = 11999")
                }
                try await document.save()
                let report = try #require(document.lastSave)
                if round == 1 {
                    #expect(report.mode == .full && report.reason?.contains("CRC-32C") == true, "\(report)")
                } else {
                    #expect(report.mode == .incremental && report.reusedSegments > 0, "\(report)")
                }
                let restarts = try #require(try Document.metadata(at: bundle).store.deflateRestarts)
                #expect(restarts.compressedCRC32Cs?.utf8.count == restarts.offsets.count * 8)
            }
            try await document.close()
            _ = try BundleReader(at: bundle).verify(full: true, workingDirectory: folder)
        }
    }
}
