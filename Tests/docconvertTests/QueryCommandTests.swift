import Foundation
import GRDB
import SystemPackage
import TestSupport
import Testing

@Suite("docconvert query")
struct QueryCommandTests {
    /// A 2 MiB store (rows of text and random blobs) as a bundle, deflated with restart points.
    private func makeBundle(in directory: FilePath) throws -> (bundle: String, store: String) {
        let store = directory.appending("store.sqlite").string
        try Fixtures.makeStore(at: FilePath(store)) { queue in
            var generator = SeededGenerator(seed: 7)
            try queue.write { db in
                try db.execute(sql: "CREATE TABLE note(id INTEGER PRIMARY KEY, title TEXT, score REAL, payload BLOB)")
                for index in 0..<4000 {
                    try db.execute(sql: "INSERT INTO note(title, score, payload) VALUES (?, ?, ?)",
                                   arguments: ["title \(index) ünï", index % 3 == 0 ? nil : Double(index) / 4,
                                               Fixtures.randomBytes(500, &generator)])
                }
            }
        }
        let bundle = directory.appending("Doc.mdz").string
        let created = try Docconvert.run(["create", bundle, "--from", store])
        #expect(created.status == 0, "\(created.stderr)")
        return (bundle, store)
    }

    @Test("rows as text and as JSON, the same as sqlite3 reads from the loose store; read in place")
    func rows() throws {
        let directory = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory.string) }  // Squash cleanup error.
        let (bundle, store) = try makeBundle(in: directory)
        let sql = "SELECT id, title, score, length(payload) AS size FROM note WHERE id % 97 = 1 ORDER BY id"
        let text = try Docconvert.run(["query", bundle, sql])
        #expect(text.status == 0, "\(text.stderr)")
        #expect(text.stderr.isEmpty, "read in place, no notice: \(text.stderr)")
        let expected = try Python.run("""
            import sqlite3, sys
            db = sqlite3.connect(sys.argv[1])
            print('id\\ttitle\\tscore\\tsize')
            for row in db.execute(sys.argv[2]):
                print('\\t'.join('NULL' if v is None else str(v) for v in row))
            """, [store, sql])
        #expect(text.stdout == expected)

        let json = try Docconvert.run(["query", "--json", bundle, "SELECT id, payload FROM note WHERE id = 5"])
        #expect(json.status == 0, "\(json.stderr)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        #expect(object["access"] as? String == "segments")
        #expect(object["columns"] as? [String] == ["id", "payload"])
        let row = try #require((object["rows"] as? [[Any]])?.first)
        let blob = try #require((row[1] as? [String: String])?["base64"]).utf8
        let payload = try Python.run("""
            import base64, sqlite3, sys
            print(base64.b64encode(sqlite3.connect(sys.argv[1]).execute('SELECT payload FROM note WHERE id = 5').fetchone()[0]).decode(), end='')
            """, [store])
        #expect(String(decoding: Array(blob), as: UTF8.self) == payload)
    }

    @Test("bad SQL and writes are usage errors (64), a missing bundle 66, a damaged segment 65 naming it")
    func errors() throws {
        let directory = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory.string) }  // Squash cleanup error.
        let (bundle, _) = try makeBundle(in: directory)
        let syntax = try Docconvert.run(["query", bundle, "SELEC nothing"])
        #expect(syntax.status == 64 && syntax.stderr.hasPrefix("error: \(bundle): SQLite refused the query: "), "\(syntax)")
        let write = try Docconvert.run(["query", bundle, "DELETE FROM note"])
        #expect(write.status == 64, "\(write)")
        let missing = try Docconvert.run(["query", directory.appending("None.mdz").string, "SELECT 1"])
        #expect(missing.status == 66, "\(missing)")

        // > A byte in the middle of the bundle's store data, flipped: the segment holding it is refused.
        var bytes = try Array(Data(contentsOf: URL(fileURLWithPath: bundle)))
        bytes[bytes.count / 2] ^= 0x20
        let damaged = directory.appending("Damaged.mdz").string
        try Data(bytes).write(to: URL(fileURLWithPath: damaged))
        let scan = try Docconvert.run(["query", damaged, "SELECT sum(length(payload)) FROM note"])
        #expect(scan.status == 65, "\(scan)")
        #expect(scan.stderr.contains("StoreContent/persistentStore: segment "), "\(scan.stderr)")
        #expect(!scan.stdout.contains("\n2"), "no sum is printed: \(scan.stdout)")
    }

    @Test("a repacked small bundle (deflated again by another tool) is served whole from memory, without a notice")
    func repacked() throws {
        let directory = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory.string) }  // Squash cleanup error.
        let (bundle, _) = try makeBundle(in: directory)
        let repacked = directory.appending("Repacked.mdz").string
        _ = try Python.run("""
            import sys, zipfile
            with zipfile.ZipFile(sys.argv[1]) as source, zipfile.ZipFile(sys.argv[2], 'w') as target:
                for info in source.infolist():
                    method = zipfile.ZIP_STORED if info.filename == 'mimetype' else zipfile.ZIP_DEFLATED
                    target.writestr(info.filename, source.read(info.filename), compress_type=method)
            """, [bundle, repacked])
        let result = try Docconvert.run(["query", "--json", repacked, "SELECT count(*) FROM note"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr.isEmpty, "\(result.stderr)")
        #expect(result.stdout.contains("\"access\":\"segments\"") && result.stdout.contains("[4000]"), "\(result.stdout)")
    }
}
