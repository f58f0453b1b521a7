// Saving, from an app's side (the public API only). Autosave: AutosaveTests.swift beside this file; segment reuse at
// the writer, which needs the library's internals: Tests/ManagedDocumentTests/Saving/SegmentReuseTests.swift.

import Foundation
import GRDB
import ManagedDocument
import SystemPackage
import TestSupport
import Testing


/// Creates a `note` table holding `rows`, and saves.
private func addNotes(_ rows: [String], to document: Document) async throws {
    try await document.writer.write { db in
        try db.execute(sql: "CREATE TABLE note(body TEXT)")
        for body in rows { try db.execute(sql: "INSERT INTO note(body) VALUES (?)", arguments: [body]) }
    }
    try await document.save()
}

/// Checks a bundle the ways a user would: `docconvert verify --full`, `unzip -t`, python's `zipfile`.
private func checkWithTools(_ bundle: FilePath) throws {
    let docconvert = Docconvert.binary
    if FileManager.default.isExecutableFile(atPath: docconvert) {
        let verified = try run(docconvert, ["verify", bundle.string])
        #expect(verified.status == 0, "docconvert verify: \(verified.output)")
    }
    let unzip = try run("/usr/bin/unzip", ["-tq", bundle.string])
    #expect(unzip.status == 0, "unzip -t: \(unzip.output)")
    let python = try Python.execute("import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); bad = z.testzip(); sys.exit(1 if bad else 0)", [bundle.string])
    #expect(python.status == 0, "python zipfile: \(python.stdout)\(python.stderr)")
}

/// The statements of the property test, drawn from a seeded generator: inserts, updates, deletes, tables, pragmas,
/// indexes and VACUUMs.
private struct RandomStatements {
    typealias Statement = (String, StatementArguments)
    var generator: SeededGenerator
    var nextID: Int64 = 1
    var extraTables = 0

    /// `count` inserts of new rows of words.
    mutating func insert(_ count: Int) -> [Statement] {
        (0..<count).map { _ in
            defer { nextID += 1 }
            return ("INSERT INTO item(id, body, extra) VALUES (?, ?, ?)",
                    [nextID, words(200 + Int(generator.next() % 1200), &generator), Int64(generator.next() % 1000)])
        }
    }

    /// One row's `extra` updated.
    mutating func singleUpdate() -> [Statement] {
        [("UPDATE item SET extra = extra + 1 WHERE id = ?", [Int64(generator.next() % UInt64(nextID))])]
    }

    /// One to eight random changes for batch `batch`, and whether a VACUUM follows them.
    mutating func changes(batch: Int) -> (statements: [Statement], vacuum: Bool) {
        var statements: [Statement] = []
        var vacuum = false
        for _ in 0..<(1 + Int(generator.next() % 8)) {
            switch generator.next() % 10 {
            case 0, 1, 2: statements += insert(1 + Int(generator.next() % 40))
            case 3, 4:
                statements.append(("UPDATE item SET body = ? WHERE id = ?",
                                   [words(50 + Int(generator.next() % 2000), &generator), Int64(generator.next() % UInt64(nextID))]))
            case 5:
                let start = Int64(generator.next() % UInt64(nextID))
                statements.append(("DELETE FROM item WHERE id BETWEEN ? AND ?", [start, start + Int64(generator.next() % 60)]))
            case 6:
                extraTables += 1
                statements.append(("CREATE TABLE extra\(extraTables)(a TEXT, b INTEGER)", []))
                statements.append(("INSERT INTO extra\(extraTables) SELECT substr(body, 1, 300), id FROM item WHERE id % 7 = ?", [Int64(generator.next() % 7)]))
            case 7:
                if extraTables > 0 { statements.append(("DROP TABLE IF EXISTS extra\(1 + Int(generator.next() % UInt64(extraTables)))", [])) }
                statements.append(("PRAGMA user_version = \(batch)", []))
            case 8:
                statements.append(("CREATE INDEX IF NOT EXISTS item_extra_\(batch % 3) ON item(extra)", []))
            default:
                vacuum = true
            }
        }
        return (statements, vacuum)
    }
}

@Suite("Incremental saves: a save costs what changed, and never misses a change")
struct IncrementalSaveTests {
    @Test("random inserts, updates, deletes, VACUUMs and schema changes, saved after each batch, equal a reference database")
    func propertyTest() async throws {
        let seed = UInt64(ProcessInfo.processInfo.environment["INCREMENTAL_SAVE_SEED"] ?? "") ?? 20261125
        let batches = Int(ProcessInfo.processInfo.environment["INCREMENTAL_SAVE_BATCHES"] ?? "") ?? 40
        var random = RandomStatements(generator: SeededGenerator(seed: seed))
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            let document = try await Document.open(at: bundle, options: appOptions(folder))
            let reference = try DatabaseQueue(path: folder.appending("reference.sqlite").string)
            var sqlLog: [String] = []

            /// Runs the same statements on the document and on the reference.
            func apply(_ statements: [(String, StatementArguments)], transaction: Bool = true) async throws {
                for (sql, _) in statements { sqlLog.append(String(sql.prefix(60))) }
                let run: @Sendable (Database) throws -> Void = { db in
                    for (sql, arguments) in statements { try db.execute(sql: sql, arguments: arguments) }
                }
                if transaction {
                    try await document.writer.write(run)
                    try await reference.write(run)
                } else {
                    try await document.writer.writeWithoutTransaction(run)
                    try await reference.writeWithoutTransaction(run)
                }
            }

            try await apply([("CREATE TABLE item(id INTEGER PRIMARY KEY, body TEXT, extra INTEGER)", [])] + random.insert(600))
            try await document.save()
            var incremental = 0, saves = 0
            var deflated: [String] = []
            for batch in 0..<batches {
                let isSingleUpdate = batch % 5 == 4
                let (statements, vacuum) = isSingleUpdate ? (random.singleUpdate(), false) : random.changes(batch: batch)
                try await apply(statements)
                if vacuum { try await apply([("VACUUM", [])], transaction: false) }
                try await document.save()
                saves += 1
                let report = try #require(document.lastSave)
                if report.mode == .incremental { incremental += 1 }
                deflated.append(report.mode == .incremental ? "\(report.deflatedSegments)/\(report.segments)" : "full")
                if isSingleUpdate {
                    // Page 1 (the change counter), the row's leaf page, at most a free-list or an index page.
                    #expect(report.mode == .incremental && report.deflatedSegments <= 4,
                            "batch \(batch), one row updated: \(report)")
                }
                let inBundle = try await bundleContent(bundle, folder: folder)
                let expected = try await reference.read { db in try StoreContent(db) }
                #expect(inBundle == expected, "batch \(batch) (seed \(seed)): the bundle's store differs from the reference after \(sqlLog.suffix(8))")
                _ = try BundleReader(at: bundle).verify(full: true)
                if batch % 4 == 0 || batch == batches - 1 { try checkWithTools(bundle) }
            }
            try await document.close()
            print("incremental saves: \(incremental) of \(saves); deflated segments per save: \(deflated)")
            #expect(incremental * 2 >= saves, "only \(incremental) of \(saves) saves were incremental")
        }
    }

    @Test("a bundle replaced or touched on disk since this open read it is never reused: the save is full")
    func replacedBundleIsNotReused() async throws {
        var generator = SeededGenerator(seed: 7)
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            let document = try await Document.open(at: bundle, options: appOptions(folder))
            let rows = (0..<300).map { _ in words(400, &generator) }
            try await addNotes(rows, to: document)
            #expect(document.lastSave?.mode == .full)  // the bundle just created had nothing to reuse worth it

            try await document.writer.write { db in try db.execute(sql: "UPDATE note SET body = 'x' WHERE rowid = 5") }
            try await document.save()
            #expect(document.lastSave?.mode == .incremental, "\(String(describing: document.lastSave))")

            // Another tool copies the bundle over itself (a sync client): same bytes, another file.
            let copy = folder.appending("copy.mdz")
            try FileManager.default.copyItem(atPath: bundle.string, toPath: copy.string)
            #expect(rename(copy.string, bundle.string) == 0)
            try await document.writer.write { db in try db.execute(sql: "UPDATE note SET body = 'y' WHERE rowid = 6") }
            try await document.save()
            #expect(document.lastSave?.mode == .full)
            #expect(document.lastSave?.reason?.contains("not the one this document last read or saved") == true)

            // Touched in place (its times change): not reused either.
            try await document.writer.write { db in try db.execute(sql: "UPDATE note SET body = 'z' WHERE rowid = 7") }
            #expect(utimes(bundle.string, nil) == 0)
            try await document.save()
            #expect(document.lastSave?.mode == .full)

            // Then the save it wrote itself is reused again.
            try await document.writer.write { db in try db.execute(sql: "UPDATE note SET body = 'w' WHERE rowid = 8") }
            try await document.save()
            #expect(document.lastSave?.mode == .incremental)
            try await document.close()
            let content = try await bundleContent(bundle, folder: folder)
            #expect(content.tables["note"]?.hasPrefix("300:") == true)
            try checkWithTools(bundle)
        }
    }

    @Test("a revert, then a save, reuses the reverted bundle; a stored document saves whole")
    func revertThenSaveAndStored() async throws {
        var generator = SeededGenerator(seed: 11)
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            let document = try await Document.open(at: bundle, options: appOptions(folder))
            let rows = (0..<300).map { _ in words(400, &generator) }
            try await addNotes(rows, to: document)
            try await document.writer.write { db in try db.execute(sql: "DELETE FROM note") }
            try await document.revert()
            try await document.writer.write { db in try db.execute(sql: "UPDATE note SET body = 'x' WHERE rowid = 1") }
            try await document.save()
            #expect(document.lastSave?.mode == .incremental)
            try await document.close()
            let content = try await bundleContent(bundle, folder: folder)
            #expect(content.tables["note"]?.hasPrefix("300:") == true)

            // Incremental saves turned off: every save deflates everything, and says why.
            var whole = appOptions(folder)
            whole.savesIncrementally = false
            let full = try await Document.open(at: bundle, options: whole)
            try await full.writer.write { db in try db.execute(sql: "UPDATE note SET body = 'y' WHERE rowid = 2") }
            try await full.save()
            #expect(full.lastSave?.mode == .full && full.lastSave?.reason?.contains("incremental saves are off") == true,
                    "\(String(describing: full.lastSave))")
            try await full.close()
            #expect(try await bundleContent(bundle, folder: folder).tables["note"]?.hasPrefix("300:") == true)

            var options = appOptions(folder)
            options.saving.compression = .store
            let stored = try await Document.open(at: folder.appending("Stored.mdz"), options: options)
            try await addNotes(rows, to: stored)
            try await stored.writer.write { db in try db.execute(sql: "UPDATE note SET body = 'x' WHERE rowid = 1") }
            try await stored.save()
            #expect(stored.lastSave?.mode == .full)
            #expect(stored.lastSave?.reason?.contains("stored") == true)
            try await stored.close()
        }
    }
}
