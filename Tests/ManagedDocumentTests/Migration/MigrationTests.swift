import Foundation
import GRDB
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

@Suite("Migrations run once each, all or nothing, and a newer model is never written by an older app")
struct MigrationTests {
    private func options(_ directory: FilePath, _ migrator: DocumentMigrator?) -> Document.OpenOptions {
        var options = Document.OpenOptions()
        options.createIfMissing = true
        options.workingDirectory = directory.appending("working")
        options.migrations = migrator
        return options
    }

    /// Version 1 of a journal app: one table, declared additively.
    private var version1: DocumentMigrator {
        var migrator = DocumentMigrator(modelName: "Journal", modelVersion: "1")
        migrator.registerAdditiveSchema("journal-1", [
            .table("entry", primaryKey: "id", columns: [.init("day", "TEXT NOT NULL", default: "''"), .init("body", "TEXT")]),
        ])
        return migrator
    }

    private func makeVersion1Document(_ directory: FilePath) async throws -> FilePath {
        let path = directory.appending("Journal.mdz")
        let document = try await Document.open(at: path, options: options(directory, version1))
        try await document.writer.write { db in
            for day in 1...40 {
                try db.execute(sql: "INSERT INTO entry(day, body) VALUES (?, ?)",
                               arguments: [String(format: "2018-01-%02d", day % 28 + 1), day % 4 == 0 ? nil : "entry \(day)"])
            }
        }
        try await document.close()
        return path
    }

    @Test("a migration that throws halfway: the bundle is byte-identical, the error names it, the next open retries")
    func throwingMigration() async throws {
        try await withTemporaryDirectory { directory in
            let path = try await makeVersion1Document(directory)
            let before = try Fixtures.bytes(of: path)
            // > Version 2 keeps version 1's migration and adds two.
            var version2 = DocumentMigrator(modelName: "Journal", modelVersion: "2")
            version2.registerAdditiveSchema("journal-1", [
                .table("entry", primaryKey: "id", columns: [.init("day", "TEXT NOT NULL", default: "''"), .init("body", "TEXT")]),
            ])
            version2.registerAdditiveSchema("journal-2-mood", [.column("mood", "INTEGER", in: "entry", default: "3")])
            struct Halfway: Error {}
            version2.registerMigration("journal-2-split-bodies") { db in
                try db.execute(sql: "UPDATE entry SET body = upper(body)")
                try db.execute(sql: "INSERT INTO entry(day, body) VALUES ('2019-01-01', 'half')")
                throw Halfway()
            }
            let error = await #expect(throws: DocumentError.self) {
                _ = try await Document.open(at: path, options: options(directory, version2))
            }
            #expect(error?.code == .migrationFailed)
            #expect(error?.reason.contains("migration 'journal-2-split-bodies' failed") == true)
            #expect(error?.underlyingError is Halfway)
            #expect(try Fixtures.bytes(of: path) == before, "journal-2-mood succeeded, but nothing is saved unless all do")
            #expect(try FileSystem.contentsOfDirectory(directory.appending("working")).isEmpty, "no working copy left")
            #expect(try Document.metadata(at: path).model.migrations.map(\.identifier) == ["journal-1"])

            // > The same document opens with a fixed release, which applies both, once.
            var fixed = DocumentMigrator(modelName: "Journal", modelVersion: "2")
            fixed.registerAdditiveSchema("journal-1", [
                .table("entry", primaryKey: "id", columns: [.init("day", "TEXT NOT NULL", default: "''"), .init("body", "TEXT")]),
            ])
            fixed.registerAdditiveSchema("journal-2-mood", [.column("mood", "INTEGER", in: "entry", default: "3")])
            fixed.registerMigration("journal-2-split-bodies") { db in
                try db.execute(sql: "UPDATE entry SET body = upper(body)")
            }
            let document = try await Document.open(at: path, options: options(directory, fixed))
            #expect(document.appliedMigrations == ["journal-2-mood", "journal-2-split-bodies"])
            let rows = try await document.reader.read { db in
                try String.fetchAll(db, sql: "SELECT ifnull(body, '-') || mood FROM entry ORDER BY id")
            }
            #expect(rows.count == 40)
            #expect(rows.first == "ENTRY 13")
            #expect(rows[3] == "-3")
            try await document.close()
            // > The record is in the store too: an extracted store still knows what ran.
            let store = directory.appending("extracted.sqlite")
            _ = try BundleReader(at: path).extractStore(to: store)
            let recorded = try await DatabaseQueue(path: store.string).read { db in
                try String.fetchAll(db, sql: "SELECT identifier FROM managed_document_migrations ORDER BY rowid")
            }
            #expect(recorded == ["journal-1", "journal-2-mood", "journal-2-split-bodies"])
        }
    }

    @Test("a document from a newer release is refused for writing, with what to do; read-only it opens, unchanged")
    func tooNew() async throws {
        try await withTemporaryDirectory { directory in
            let path = try await makeVersion1Document(directory)
            // > A newer release raised the document to level 2 and added a migration this release does not know.
            var newer = DocumentMigrator(modelName: "Journal", modelVersion: "3", compatibilityLevel: 2)
            newer.registerAdditiveSchema("journal-1", [
                .table("entry", primaryKey: "id", columns: [.init("day", "TEXT NOT NULL", default: "''"), .init("body", "TEXT")]),
            ])
            newer.registerFixup(level: 2, "journal-level-2-trim") { db in try db.execute(sql: "UPDATE entry SET body = trim(body)") }
            let upgraded = try await Document.open(at: path, options: options(directory, newer))
            #expect(upgraded.appliedMigrations == ["journal-level-2-trim"])
            try await upgraded.close()
            let before = try Fixtures.bytes(of: path)

            for older in [version1, DocumentMigrator(modelName: "Journal", modelVersion: "2", compatibilityLevel: 2)] {
                let error = await #expect(throws: DocumentError.self) {
                    _ = try await Document.open(at: path, options: options(directory, older))
                }
                #expect(error?.code == .newerModel)
                #expect(error?.reason.contains("update the app") == true)
                #expect(error?.reason.contains("read-only") == true)
            }
            var readOnly = options(directory, version1)
            readOnly.isReadOnly = true
            let document = try await Document.open(at: path, options: readOnly)
            #expect(try await document.reader.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM entry") } == 40)
            #expect(document.metadata.model.compatibilityLevel == 2)
            try await document.close()
            #expect(try Fixtures.bytes(of: path) == before)
        }
    }

    @Test("additive schemas create what is missing and leave what exists; fix-ups above the document's level run in order, once")
    func additiveAndLevels() async throws {
        try await withTemporaryDirectory { directory in
            let path = try await makeVersion1Document(directory)
            let order = OrderLog()
            func release(level: Int) -> DocumentMigrator {
                var migrator = DocumentMigrator(modelName: "Journal", modelVersion: "2", compatibilityLevel: level)
                migrator.registerAdditiveSchema("journal-1", [
                    .table("entry", primaryKey: "id", columns: [.init("day", "TEXT NOT NULL", default: "''"), .init("body", "TEXT")]),
                ])
                // > An existing table named again with one more column: only the column is added.
                migrator.registerAdditiveSchema("journal-2", [
                    .table("entry", primaryKey: "id", columns: [.init("body", "TEXT"), .init("weather", "TEXT", default: "'sunny'")]),
                    .table("tag", columns: [.init("name", "TEXT")]),
                ])
                migrator.registerFixup(level: 1, "level-1") { db in
                    order.append("1")
                    try db.execute(sql: "INSERT INTO tag(name) VALUES ('imported')")
                }
                migrator.registerFixup(level: 2, "level-2") { _ in order.append("2") }
                migrator.registerFixup(level: 3, "level-3") { _ in order.append("3") }
                return migrator
            }
            // > A release that supports level 1 only: the level 2 and 3 blocks it carries do not run.
            let first = try await Document.open(at: path, options: options(directory, release(level: 1)))
            #expect(first.appliedMigrations == ["journal-2", "level-1"])
            #expect(first.metadata.model.compatibilityLevel == 1)
            try await first.close()
            // > The next release supports level 3: the blocks above the document's level run, in order, once.
            for launch in 0..<3 {
                let document = try await Document.open(at: path, options: options(directory, release(level: 3)))
                #expect(document.appliedMigrations == (launch == 0 ? ["level-2", "level-3"] : []))
                let facts = try await document.reader.read { db in
                    (try db.columns(in: "entry").map(\.name), try String.fetchAll(db, sql: "SELECT DISTINCT weather FROM entry"),
                     try Int.fetchOne(db, sql: "SELECT count(*) FROM tag") ?? 0)
                }
                #expect(facts.0 == ["id", "day", "body", "weather"])
                #expect(facts.1 == ["sunny"])
                #expect(facts.2 == 1)
                #expect(document.metadata.model.compatibilityLevel == 3)
                try await document.close()
            }
            #expect(order.entries == ["1", "2", "3"])
        }
    }
}

/// Records the order closures ran in, from any thread.
final class OrderLog: @unchecked Sendable {
    private let lock = NSLock()
    private var _entries: [String] = []
    func append(_ entry: String) { lock.withLock { _entries.append(entry) } }
    var entries: [String] { lock.withLock { _entries } }
}
