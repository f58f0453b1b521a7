import Foundation
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument
import SystemPackage
import TestSupport
import Testing

/// `docconvert migrate` on a tree of bundles, through the built binary.
@Suite("docconvert migrate")
struct MigrateCommandTests {
    /// Four documents in nested folders (one in a hidden folder, which is searched as `batch` searches it), a
    /// look-alike file that is not a bundle, and a write's temporary that is skipped.
    private func makeTree(_ directory: FilePath) throws -> [FilePath] {
        let bundles = [directory.appending("tree/Alpha.mdz"), directory.appending("tree/sub/Beta.mdz"),
                       directory.appending("tree/sub/deeper/Gamma Ω.mdz"), directory.appending("tree/.hidden/Hidden.mdz")]
        for bundle in bundles {
            try FileManager.default.createDirectory(atPath: bundle.removingLastComponent().string,
                                                    withIntermediateDirectories: true)
            let created = try Docconvert.run(["create", bundle.string, "--model-name", "Journal"])
            #expect(created.status == 0, "\(created.stderr)")
        }
        try FileManager.default.copyItem(atPath: bundles[0].string,
                                         toPath: directory.appending("tree/.Alpha.mdz.1234.partial").string)
        try Data("PK not really".utf8).write(to: URL(fileURLWithPath: directory.appending("tree/sub/fake.mdz").string))
        return bundles
    }

    private func write(_ text: String, _ path: FilePath) throws {
        try Data(text.utf8).write(to: URL(fileURLWithPath: path.string))
    }

    private func makeMigrations(_ directory: FilePath) throws -> FilePath {
        let folder = directory.appending("migrations")
        try FileManager.default.createDirectory(atPath: folder.string, withIntermediateDirectories: true)
        try write("CREATE TABLE entry (id INTEGER PRIMARY KEY, day TEXT NOT NULL, body TEXT);\n",
                  folder.appending("V1__create_entries.sql"))
        try write("INSERT INTO entry(day, body) VALUES ('2017-12-30', 'snow'), ('2018-01-01', NULL);\r\n",
                  folder.appending("V2__seed_entries.sql"))
        try write("ALTER TABLE entry ADD COLUMN mood INTEGER NOT NULL DEFAULT 3;\nUPDATE entry SET mood = 5 WHERE body IS NOT NULL;\n",
                  folder.appending("V10__add_mood.sql"))
        try write("Migrations for the journal app.\n", folder.appending("README.md"))
        return folder
    }

    private func contents(_ files: [FilePath]) throws -> [Data] {
        try files.map { try Data(contentsOf: URL(fileURLWithPath: $0.string)) }
    }

    /// The rows of `entry` in a bundle, read from an extracted copy with the sqlite3 shell.
    private func rows(_ bundle: FilePath, _ scratch: FilePath) throws -> String {
        let store = scratch.appending("extract-\(UUID().uuidString).sqlite")
        let extracted = try Docconvert.run(["extract", bundle.string, "--output", store.string])
        #expect(extracted.status == 0, "\(extracted.stderr)")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["sqlite3", store.string,
                             "SELECT id, day, ifnull(body, 'NULL'), mood FROM entry ORDER BY id;"
                             + "SELECT identifier FROM managed_document_migrations ORDER BY rowid;"]
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let output = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: output, as: UTF8.self)
    }

    @Test("three SQL migrations over a tree: applied in version order once; a rerun applies nothing")
    func appliesOnceInOrder() throws {
        let directory = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory.string) }  // Squash cleanup error.
        let bundles = try makeTree(directory)
        let migrations = try makeMigrations(directory)

        let dryRun = try Docconvert.run(["migrate", directory.appending("tree").string, "--migrations", migrations.string,
                                      "--dry-run"])
        #expect(dryRun.status == 0, "\(dryRun.stderr)")
        #expect(dryRun.stdout.components(separatedBy: "would apply V1__create_entries, V2__seed_entries, V10__add_mood").count == 5)
        let untouched = try contents(bundles)

        let first = try Docconvert.run(["migrate", directory.appending("tree").string, "--migrations", migrations.string,
                                     "--json"])
        #expect(first.status == 0, "\(first.stderr)")
        let report = try JSONSerialization.jsonObject(with: Data(first.stdout.utf8)) as? [String: Any]
        let documents = report?["documents"] as? [[String: Any]] ?? []
        #expect(documents.map { $0["path"] as? String } == bundles.map(\.string).sorted(), "the fake and the temporary are skipped")
        for document in documents {
            #expect(document["status"] as? String == "applied")
            #expect(document["applied"] as? [String] == ["V1__create_entries", "V2__seed_entries", "V10__add_mood"])
        }
        #expect(try contents(bundles) != untouched)
        for bundle in bundles {
            #expect(try rows(bundle, directory) == """
                1|2017-12-30|snow|5
                2|2018-01-01|NULL|3
                V1__create_entries
                V2__seed_entries
                V10__add_mood

                """)
            let model = try Document.metadata(at: bundle).model
            #expect(model.name == "Journal", "the document keeps its model")
            #expect(model.migrations.map(\.identifier) == ["V1__create_entries", "V2__seed_entries", "V10__add_mood"])
            #expect(model.migrations.allSatisfy { $0.checksum?.count == 64 })
        }
        let inspected = try Docconvert.run(["inspect", bundles[1].string])
        #expect(inspected.stdout.contains("V10__add_mood"))

        let migrated = try contents(bundles)
        let rerun = try Docconvert.run(["migrate", directory.appending("tree").string, "--migrations", migrations.string])
        #expect(rerun.status == 0, "\(rerun.stderr)")
        #expect(rerun.stdout.components(separatedBy: ": up to date").count == 5)
        #expect(try contents(bundles) == migrated, "a rerun changes no byte")
    }

    @Test("an applied file that was edited is reported and nothing is applied anywhere")
    func editedFileStopsEverything() throws {
        let directory = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory.string) }  // Squash cleanup error.
        let bundles = try makeTree(directory)
        let migrations = try makeMigrations(directory)
        #expect(try Docconvert.run(["migrate", bundles[0].string, "--migrations", migrations.string]).status == 0)
        let before = try contents(bundles)

        // > Edited V2 (applied to Alpha only), and a new V11 that would be pending everywhere.
        try write("INSERT INTO entry(day, body) VALUES ('2017-12-30', 'rain');\n", migrations.appending("V2__seed_entries.sql"))
        try write("CREATE INDEX entry_day ON entry(day);\n", migrations.appending("V11__index_days.sql"))
        let result = try Docconvert.run(["migrate", directory.appending("tree").string, "--migrations", migrations.string])
        #expect(result.status == 65)
        #expect(result.stderr.contains("Alpha.mdz: V2__seed_entries.sql has changed since it was applied"), "\(result.stderr)")
        #expect(result.stderr.contains("nothing was applied"))
        #expect(try contents(bundles) == before, "no document changed, not even the ones that agree")

        // > A new file whose version sorts below an applied one.
        try write("INSERT INTO entry(day, body) VALUES ('2017-12-30', 'snow'), ('2018-01-01', NULL);\r\n",
                  migrations.appending("V2__seed_entries.sql"))
        try FileManager.default.removeItem(atPath: migrations.appending("V11__index_days.sql").string)
        try write("SELECT 1;\n", migrations.appending("V3_5__late.sql"))
        let late = try Docconvert.run(["migrate", bundles[0].string, "--migrations", migrations.string])
        #expect(late.status == 65)
        #expect(late.stderr.contains("V3_5__late.sql is not applied, but a later version (10) is"), "\(late.stderr)")
        #expect(try contents(bundles) == before)
    }

    @Test("a migration that fails leaves its document byte-identical and names the file")
    func failingMigration() throws {
        let directory = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory.string) }  // Squash cleanup error.
        let bundles = try makeTree(directory)
        let migrations = try makeMigrations(directory)
        try write("INSERT INTO entry(day) VALUES ('2019-05-05');\nINSERT INTO no_such_table VALUES (1);\n",
                  migrations.appending("V11__broken.sql"))
        let before = try contents(bundles)
        let result = try Docconvert.run(["migrate", bundles[2].string, "--migrations", migrations.string])
        #expect(result.status == 65)
        #expect(result.stderr.contains("migration 'V11__broken' failed"), "\(result.stderr)")
        #expect(try contents(bundles) == before, "V1, V2 and V10 succeeded, but the document is saved only when all did")
    }

    @Test("a misnamed or duplicate migration file is refused before any document is opened")
    func invalidFolder() throws {
        let directory = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory.string) }  // Squash cleanup error.
        let bundles = try makeTree(directory)
        let migrations = try makeMigrations(directory)
        let before = try contents(bundles)
        try write("SELECT 1;\n", migrations.appending("v4-lowercase.sql"))
        let misnamed = try Docconvert.run(["migrate", bundles[0].string, "--migrations", migrations.string])
        #expect(misnamed.status == 65)
        #expect(misnamed.stderr.contains("v4-lowercase.sql: not a migration name"), "\(misnamed.stderr)")
        try FileManager.default.removeItem(atPath: migrations.appending("v4-lowercase.sql").string)
        try write("SELECT 1;\n", migrations.appending("V1.0__again.sql"))
        let duplicate = try Docconvert.run(["migrate", bundles[0].string, "--migrations", migrations.string])
        #expect(duplicate.status == 65)
        #expect(duplicate.stderr.contains("has the same version as"), "\(duplicate.stderr)")
        let missing = try Docconvert.run(["migrate", bundles[0].string, "--migrations", directory.appending("nope").string])
        #expect(missing.status == 66)
        #expect(try contents(bundles) == before)
    }

    @Test("version ordering and the naming scheme")
    func naming() throws {
        #expect(SQLMigrationFolder.parse(name: "V1__a.sql")?.version == [1])
        #expect(SQLMigrationFolder.parse(name: "V2_1__fix_names.sql")?.version == [2, 1])
        #expect(SQLMigrationFolder.parse(name: "V2.1.0__x.sql")?.version == [2, 1])
        #expect(SQLMigrationFolder.parse(name: "V10__b.sql")?.description == "b")
        for bad in ["V__a.sql", "V1_a.sql", "1__a.sql", "V1__.sql", "V1__a-b.sql", "Vx__a.sql", "V1..2__a.sql",
                    "V-1__a.sql", "V1__a.SQL", "V9999999999__a.sql"] {
            #expect(SQLMigrationFolder.parse(name: bad) == nil, "\(bad)")
        }
    }
}
