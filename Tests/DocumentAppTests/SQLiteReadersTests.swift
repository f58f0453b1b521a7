import Foundation
import GRDB
import ManagedDocument
import SystemPackage
import TestSupport
import Testing

@Suite("SQLite tools read a document while the app saves it")
struct SQLiteReadersTests {
    /// Reads the document through the extension again and again until its input closes: each read one query in a
    /// fresh connection (the rows' count and the lowest and highest `version`); then one line: the reads, the
    /// versions seen, and every read that was not one whole version.
    static let reader = """
        import select, sqlite3, sys
        loader = sqlite3.connect(':memory:'); loader.enable_load_extension(True); loader.load_extension(sys.argv[1])
        rows, reads, seen, torn = int(sys.argv[3]), 0, set(), []
        print('ready')
        while not select.select([sys.stdin], [], [], 0)[0]:
            try:
                con = sqlite3.connect(sys.argv[2], uri=True)
                count, low, high = con.execute('SELECT count(*), min(version), max(version) FROM item').fetchone()
                con.close()
            except sqlite3.Error as error:
                torn.append('error: %s' % error)
                continue
            reads += 1
            seen.add(low)
            if count != rows or low != high:
                torn.append('%d rows, versions %d-%d' % (count, low, high))
        print('reads %d versions %s torn %s' % (reads, sorted(seen), torn))
        """

    @Test("two python processes read through the extension while the library saves: each read is one whole version")
    func readersSeeWholeVersions() async throws {
        try #require(SQLiteHosts.unavailable == nil, "\(SQLiteHosts.unavailable ?? "")")
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Shared.mdz")
            let rows = 20000
            let document = try await Document.open(at: bundle, options: appOptions(folder))
            try await document.writer.write { db in
                try db.execute(sql: "CREATE TABLE item(id INTEGER PRIMARY KEY, version INTEGER, body TEXT)")
                for index in 0..<rows {
                    try db.execute(sql: "INSERT INTO item(version, body) VALUES (0, ?)",
                                   arguments: [String(repeating: "row \(index) ", count: 20)])
                }
            }
            try await document.save()
            let readers = try (0..<2).map { _ in
                try PythonProcess(Self.reader, [SQLiteHosts.library, SQLiteHosts.uri(bundle.string, readOnly: true),
                                                "\(rows)"], python: SQLiteHosts.python)
            }
            for reader in readers { #expect(reader.readLine() == "ready") }
            for version in 1...8 {
                try await document.writer.write { db in
                    // > Every row of a version changes: a read mixing two versions would see two values.
                    try db.execute(sql: "UPDATE item SET version = ?", arguments: [version])
                    if version % 2 == 0 { try db.execute(sql: "UPDATE item SET body = body || 'x' WHERE id % 7 = 0") }
                }
                try await document.save()
                try await Task.sleep(nanoseconds: 50_000_000)
            }
            try await document.close()
            var versions = Set<Int>()
            for reader in readers {
                let result = reader.finish()
                #expect(result.status == 0)
                #expect(result.output.contains("torn []"), "\(result.output)")
                print("mdzvfs reader: \(result.output.trimmingCharacters(in: .whitespacesAndNewlines))")
                let seen = result.output.split(separator: "[").dropFirst().first?.split(separator: "]").first ?? ""
                versions.formUnion(seen.split(separator: ",").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) })
            }
            // > The readers read while the versions changed: more than one version seen, or the test proved nothing.
            #expect(versions.count >= 2, "versions seen: \(versions.sorted())")
        }
    }
}
