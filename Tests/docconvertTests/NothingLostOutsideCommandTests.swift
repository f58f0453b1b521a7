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

    /// A loose SQLite store of `rows` notes, made with python3's sqlite3.
    private static func makeStore(_ path: FilePath, rows: Int = 3) throws {
        try FileManager.default.createDirectory(atPath: path.removingLastComponent().string,
                                                withIntermediateDirectories: true)
        _ = try Python.run("""
            import sqlite3, sys
            db = sqlite3.connect(sys.argv[1])
            db.execute('CREATE TABLE note(id INTEGER PRIMARY KEY, title TEXT)')
            db.executemany('INSERT INTO note(title) VALUES (?)', [('note %d' % i,) for i in range(int(sys.argv[2]))])
            db.commit()
            """, [path.string, String(rows)])
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
        for store in stores { try Self.makeStore(tree.appending(store)) }
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
}
