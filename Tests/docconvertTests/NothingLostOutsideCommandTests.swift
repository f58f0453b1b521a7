import Foundation
import SystemPackage
import TestSupport
import Testing

/// The built `docconvert` around bundles: a FIFO where a bundle is expected, bundles that `batch` wrote in hidden
/// folders, and the lines a user reads when something is wrong.
@Suite("docconvert: nothing lost outside the bundle")
struct NothingLostOutsideCommandTests {
    /// Runs the binary under `timeout(1)`: a command that hangs is killed after `seconds` and reports status 124.
    private static func run(_ arguments: [String], seconds: Int = 20) throws -> (status: Int32, stdout: String, stderr: String) {
        try execute("/usr/bin/timeout", ["-k", "5", String(seconds), Docconvert.binary] + arguments)
    }

    static let fifoCommands: [[String]] = [
        ["inspect", "FIFO"], ["inspect", "--json", "FIFO"], ["verify", "FIFO"], ["query", "FIFO", "SELECT 1"],
        ["extract", "FIFO", "--output", "OUT/x.sqlite"], ["extract", "FIFO", "--directory", "OUT/x"],
        ["migrate", "FIFO", "--migrations", "MIGRATIONS"], ["convert", "FIFO", "--legacy", "keep"],
    ]

    @Test("every command given a FIFO named x.mdz returns at once: not a regular file, 65 as convert says",
          arguments: fifoCommands)
    func fifo(_ command: [String]) throws {
        let directory = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory.string) }  // Squash cleanup error.
        let fifo = directory.appending("x.mdz")
        #expect(mkfifo(fifo.string, 0o600) == 0)
        let migrations = directory.appending("migrations")
        try FileManager.default.createDirectory(atPath: migrations.string, withIntermediateDirectories: true)
        let arguments = command.map {
            $0.replacingOccurrences(of: "FIFO", with: fifo.string).replacingOccurrences(of: "OUT", with: directory.string)
                .replacingOccurrences(of: "MIGRATIONS", with: migrations.string)
        }
        let started = Date()
        let result = try Self.run(arguments)
        #expect(result.status == 65, "\(command): \(result.status) \(result.stderr)")
        #expect(Date().timeIntervalSince(started) < 15, "\(command) waited for a writer")
        #expect(result.stderr.hasPrefix("error: \(fifo): is not a regular file"), "\(command): \(result.stderr)")
        #expect(FileManager.default.fileExists(atPath: fifo.string), "the FIFO is left where it was")
    }

    @Test("migrate migrates every bundle batch converted, hidden folders included")
    func hiddenFolders() throws {
        let directory = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory.string) }  // Squash cleanup error.
        let tree = directory.appending("home")
        let stores = ["Notes.sqlite", "work/Plan.sqlite", ".hidden/h.sqlite", ".local/share/notes/Notes.sqlite",
                      "projects/.cache/c.sqlite"]
        for store in stores { try Fixtures.makeListStore(at: tree.appending(store), rows: 3) }
        let batch = try Docconvert.run(["batch", tree.string, "--legacy", "keep", "--quiet"])
        #expect(batch.status == 0, "\(batch.stderr)")
        let enumerator = FileManager.default.enumerator(atPath: tree.string)
        var written: Set<String> = []
        while let relative = enumerator?.nextObject() as? String {
            if relative.hasSuffix(".mdz") { written.insert(tree.appending(relative).string) }
        }
        #expect(written.count == stores.count, "\(written)")

        let migrations = directory.appending("migrations")
        try FileManager.default.createDirectory(atPath: migrations.string, withIntermediateDirectories: true)
        try Data("CREATE TABLE tag(name TEXT);\n".utf8)
            .write(to: URL(fileURLWithPath: migrations.appending("V1__tags.sql").string))
        let migrated = try Docconvert.run(["migrate", tree.string, "--migrations", migrations.string, "--json"])
        #expect(migrated.status == 0, "\(migrated.stderr)")
        let report = try JSONSerialization.jsonObject(with: Data(migrated.stdout.utf8)) as? [String: Any]
        let documents = report?["documents"] as? [[String: Any]] ?? []
        #expect(Set(documents.compactMap { $0["path"] as? String }) == written)
        #expect(documents.allSatisfy { $0["status"] as? String == "applied" }, "\(documents)")
    }

    @Test("inspect names a metadata key of the wrong kind in the format's words",
          arguments: [
            ("formatVersion", "\"2\"", "formatVersion must be a whole number, found a string"),
            ("documentID", "5", "documentID must be a string, found a number"),
            ("model.name", "7", "model.name must be a string, found a number"),
          ])
    func metadataKinds(_ key: String, _ value: String, _ expected: String) throws {
        let directory = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory.string) }  // Squash cleanup error.
        let good = directory.appending("Good.mdz").string
        #expect(try Docconvert.run(["create", good]).status == 0)
        let bad = directory.appending("Bad.mdz").string
        try Python.rewritingMetadata(of: good, to: bad, [(key, value)])
        let result = try Docconvert.run(["inspect", bad])
        #expect(result.status == 65)
        #expect(result.stderr == "error: \(bad): DocumentMetadata.json: \(expected)\n", "\(result.stderr)")
    }

    @Test("query refused by SQLite as it starts (ATTACH) prints its error and no empty header line")
    func attach() throws {
        let directory = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory.string) }  // Squash cleanup error.
        let bundle = directory.appending("Doc.mdz").string
        #expect(try Docconvert.run(["create", bundle]).status == 0)
        let other = directory.appending("other.sqlite").string
        let result = try Docconvert.run(["query", bundle, "ATTACH DATABASE '\(other)' AS other"])
        #expect(result.status == 64, "\(result)")
        #expect(result.stdout.isEmpty, "\(result.stdout.debugDescription)")
        #expect(result.stderr.hasPrefix("error: \(bundle): "), "\(result.stderr)")
        let empty = try Docconvert.run(["query", bundle, "SELECT name FROM sqlite_master WHERE 0"])
        #expect(empty.status == 0 && empty.stdout == "name\n", "a query without rows still prints its header")
    }

    @Test("merge-reports with a shard count other than the reports' says error: and exits 65")
    func mergeReportsCount() throws {
        let directory = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory.string) }  // Squash cleanup error.
        let tree = directory.appending("tree")
        try Fixtures.makeListStore(at: tree.appending("Notes.sqlite"), rows: 3)
        let reports = directory.appending("reports")
        try FileManager.default.createDirectory(atPath: reports.string, withIntermediateDirectories: true)
        for shard in 0..<3 {
            let batch = try Docconvert.run(["batch", tree.string, "--legacy", "keep", "--quiet", "--shard", "\(shard)/3",
                                            "--report", reports.appending("shard-\(shard).json").string])
            #expect(batch.status == 0, "\(batch.stderr)")
        }
        let result = try Docconvert.run(["merge-reports", reports.string, "4"])
        #expect(result.status == 65)
        #expect(result.stderr == "error: the reports are shards of 3, not of 4\n", "\(result.stderr)")
    }

    @Test("a backup folder that cannot be created is named in the error")
    func backupFolderNamed() throws {
        let directory = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory.string) }  // Squash cleanup error.
        let store = directory.appending("Notes.sqlite")
        try Fixtures.makeListStore(at: store, rows: 3)
        let blocker = directory.appending("blocker")
        try Data("a file where a folder is asked for".utf8).write(to: URL(fileURLWithPath: blocker.string))
        let backup = blocker.appending("backups")
        let result = try Docconvert.run(["convert", store.string, "--backup-dir", backup.string])
        #expect(result.status != 0)
        #expect(result.stderr.contains("\(backup)"), "\(result.stderr)")
        #expect(result.stderr.contains("cannot create the folder"), "\(result.stderr)")
    }

    @Test("the notice of an extracted store says why once, without nested parentheses")
    func extractionNotice() throws {
        let directory = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory.string) }  // Squash cleanup error.
        // > 6 MiB of random blobs: past the 4 MiB a repacked store may be served whole from memory.
        let store = directory.appending("store.sqlite").string
        _ = try Python.run("""
            import os, sqlite3, sys
            db = sqlite3.connect(sys.argv[1])
            db.execute('CREATE TABLE blob(id INTEGER PRIMARY KEY, payload BLOB)')
            db.executemany('INSERT INTO blob(payload) VALUES (?)', [(os.urandom(4000),) for _ in range(1500)])
            db.commit()
            """, [store])
        let bundle = directory.appending("Doc.mdz").string
        #expect(try Docconvert.run(["create", bundle, "--from", store]).status == 0)
        let repacked = directory.appending("Repacked.mdz").string
        _ = try Python.run("""
            import sys, zipfile
            with zipfile.ZipFile(sys.argv[1]) as source, zipfile.ZipFile(sys.argv[2], 'w') as target:
                for info in source.infolist():
                    method = zipfile.ZIP_STORED if info.filename == 'mimetype' else zipfile.ZIP_DEFLATED
                    target.writestr(info.filename, source.read(info.filename), compress_type=method)
            """, [bundle, repacked])
        let result = try Docconvert.run(["query", repacked, "SELECT count(*) FROM blob"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == "count(*)\n1500\n")
        let notice = result.stderr
        #expect(notice.hasPrefix("notice: \(repacked): the store was extracted to be read, because the deflated store's restart index is stale: "), "\(notice)")
        #expect(!notice.contains("(stale") && !notice.contains("read in one stream"), "\(notice)")
        #expect(notice.filter { $0 == "(" }.count <= 1, "\(notice)")
    }
}
