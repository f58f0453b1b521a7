// A property test of writable documents served from their bundle (FORMAT.md 16.2), from an app's side (the public
// API only): random steps (rows, DDL, large blobs, VACUUM, save, revert, autosave, close and reopen, a writer killed
// and recovered) against a model of two plain SQLite databases, the content last saved and the content now.
//
// Reproduce or extend a run: WRITABLE_STEPS_SEED=<seed> WRITABLE_STEPS_COUNT=<steps> swift test --filter WritableRandomSteps

import Crypto
import Foundation
import GRDB
import ManagedDocument
import SystemPackage
import TestSupport
import Testing

/// Every file below `folder`, relative names (folders left out).
private func files(below folder: FilePath) -> [String] {
    guard let enumerator = FileManager.default.enumerator(atPath: folder.string) else { return [] }
    var found: [String] = []
    while let name = enumerator.nextObject() as? String {
        var info = stat()
        if lstat(folder.appending(name).string, &info) != 0 || info.st_mode & S_IFMT != S_IFDIR { found.append(name) }
    }
    return found.sorted()
}





/// Bytes that do not deflate: a large blob makes the bundle grow by about its size.
private func noise(_ count: Int, _ generator: inout SeededGenerator) -> Data {
    var data = Data(capacity: count + 8)
    while data.count < count { withUnsafeBytes(of: generator.next()) { data.append(contentsOf: $0) } }
    return data.prefix(count)
}

/// The kinds of step, with their weights.
private enum Kind: String, CaseIterable {
    case updateNotes, insertNotes, deleteNotes, createTable, dropTable, addColumn, tableRows, insertBlob, deleteBlob,
         vacuum, failedWrite, save, saveTwice, saveThenRevert, revert, autosave, closeSaving, closeDiscarding, kill

    var weight: Int {
        switch self {
        case .updateNotes: 12
        case .insertNotes: 6
        case .deleteNotes: 5
        case .createTable: 3
        case .dropTable: 2
        case .addColumn: 3
        case .tableRows: 6
        case .insertBlob: 5
        case .deleteBlob: 4
        case .vacuum: 2
        case .failedWrite: 2
        case .save: 10
        case .saveTwice: 2
        case .saveThenRevert: 2
        case .revert: 4
        case .autosave: 2
        case .closeSaving: 3
        case .closeDiscarding: 2
        case .kill: 3
        }
    }

    static func pick(_ generator: inout SeededGenerator) -> Kind {
        let total = allCases.reduce(0) { $0 + $1.weight }
        var draw = Int(generator.next() % UInt64(total))
        for kind in allCases {
            if draw < kind.weight { return kind }
            draw -= kind.weight
        }
        return .save
    }
}

/// A statement and its arguments, run the same on the document and on the model.
private struct Change: Sendable {
    var sql: String
    var arguments: StatementArguments = []
}

private struct Failure: Error, CustomStringConvertible {
    var description: String
}

/// One run: the document, the model (what the bundle holds, what the document holds), and the steps' counts.
private final class Run {
    let seed: UInt64
    let folder: FilePath
    let bundle: FilePath
    let working: FilePath
    var generator: SeededGenerator
    var document: Document
    let saved: DatabaseQueue
    let current: DatabaseQueue
    var context = "setup"
    var kinds: [Kind: Int] = [:]
    var saves = (incremental: 0, full: 0)
    var fullReasons: [String] = []
    var kills = (bundleAdvanced: 0, recoveredUnsaved: 0)
    /// A VACUUM (it writes every page) since the last save or revert: the next save is full.
    var vacuumUnsaved = false
    var savesAfterVacuum = 0

    init(seed: UInt64, folder: FilePath) async throws {
        self.seed = seed
        self.folder = folder
        bundle = folder.appending("Notes.mdz")
        working = childWorkingDirectory(folder)
        generator = SeededGenerator(seed: seed)

        // The document: 1600 rows of about 3 KiB (5 MiB deflated in restart segments), the journal's table, a table
        // of blobs.
        var options = appOptions(folder)
        options.workingDirectory = folder.appending("maker")
        let maker = try await Document.open(at: bundle, options: options)
        var bodies = SeededGenerator(seed: 11)
        let texts = (0..<1600).map { _ in words(380, &bodies) }
        try await maker.writer.write { db in
            try db.execute(sql: "CREATE TABLE note(id INTEGER PRIMARY KEY, body TEXT, n INTEGER)")
            try db.execute(sql: "CREATE TABLE entry(id INTEGER PRIMARY KEY, text TEXT NOT NULL, payload BLOB)")
            try db.execute(sql: "CREATE TABLE blob(id INTEGER PRIMARY KEY, data BLOB)")
            for (index, body) in texts.enumerated() {
                try db.execute(sql: "INSERT INTO note(id, body, n) VALUES (?, ?, 0)", arguments: [index + 1, body])
            }
        }
        try await maker.close()
        let size = try BundleReader(at: bundle).metadata.store.size
        guard size >= 4 << 20 else { throw Failure(description: "the store is \(size) bytes, not a 5 MiB one") }

        let extracted = try BundleReader(at: bundle).extract(into: folder.appending("model-saved"))
        saved = try DatabaseQueue(path: extracted.store.string)
        current = try DatabaseQueue(path: folder.appending("model-current.sqlite").string)
        try saved.backup(to: current)
        document = try await Document.open(at: bundle, options: Run.options(folder))
    }

    /// The options of every writable open: working copies where `notes-app` keeps its own, recovered.
    static func options(_ folder: FilePath, autosave: Double? = nil) -> Document.OpenOptions {
        var options = appOptions(folder)
        options.workingDirectory = childWorkingDirectory(folder)
        options.recovery = .recover
        options.autosaveInterval = autosave
        return options
    }

    func random(_ range: ClosedRange<Int>) -> Int {
        range.lowerBound + Int(generator.next() % UInt64(range.count))
    }

    func chance(_ percent: Int) -> Bool { random(0...99) < percent }

    func fail(_ message: String) -> Failure {
        Failure(description: "\(context): \(message)")
    }

    /// Runs `statements` in one transaction on the document, then on the model's current content.
    func apply(_ statements: [Change]) async throws {
        try await document.writer.write { db in
            for statement in statements { try db.execute(sql: statement.sql, arguments: statement.arguments) }
        }
        try await current.write { db in
            for statement in statements { try db.execute(sql: statement.sql, arguments: statement.arguments) }
        }
    }

    /// The model's current content answers a question the next step's choice depends on.
    func ask<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        try await current.read(body)
    }

    func extraTables() async throws -> [String] {
        try await ask { db in try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name GLOB 't[0-9]*' ORDER BY name") }
    }

    /// Saving, in the model: the bundle takes the current content.
    func markSaved() throws {
        try current.backup(to: saved)
        vacuumUnsaved = false
    }

    /// Reverting, in the model: the current content goes back to the last save.
    func markReverted() throws {
        try saved.backup(to: current)
        vacuumUnsaved = false
    }

    func countSave() {
        guard let report = document.lastSave else { return }
        if vacuumUnsaved {
            savesAfterVacuum += 1
            if report.mode != .full { Issue.record("\(context): a save after a VACUUM, which writes every page: \(report)") }
        }
        switch report.mode {
        case .incremental: saves.incremental += 1
        case .full:
            saves.full += 1
            fullReasons.append("\(context): \(report)")
        }
    }

    func save() async throws {
        try await document.save()
        countSave()
        try markSaved()
        guard document.state == .normal else { throw fail("after a save: \(document.state)") }
    }

    /// Closes the document (saving or not) and checks that no working copy is left.
    func close(savingChanges: Bool) async throws {
        try await document.close(savingChanges: savingChanges)
        if savingChanges { try markSaved() } else { try markReverted() }
        let left = files(below: working)
        guard left.isEmpty else { throw fail("a working copy is left after close: \(left)") }
    }

    /// Opens the bundle again after a close: nothing to recover, nothing unsaved.
    func reopen(autosave: Double? = nil) async throws {
        document = try await Document.open(at: bundle, options: Run.options(folder, autosave: autosave))
        guard document.state == .normal else { throw fail("opened again after a close: \(document.state)") }
    }

    // MARK: The steps

    func step(_ kind: Kind) async throws {
        switch kind {
        case .updateNotes, .insertNotes, .deleteNotes: try await changeNotes(kind)
        case .createTable, .dropTable, .addColumn, .tableRows: try await changeTables(kind)
        case .insertBlob, .deleteBlob, .vacuum, .failedWrite: try await changeBlobsOrPages(kind)
        case .save, .saveTwice, .saveThenRevert, .revert, .autosave, .closeSaving, .closeDiscarding, .kill:
            try await saveOrClose(kind)
        }
    }

    /// Rows of `note` updated, inserted or deleted.
    private func changeNotes(_ kind: Kind) async throws {
        switch kind {
        case .updateNotes:
            let ids = try await ask { db in try Int.fetchAll(db, sql: "SELECT id FROM note ORDER BY id") }
            guard let first = ids.first else { return try await step(.insertNotes) }
            let start = ids[random(0...(ids.count - 1))]
            let width = chance(80) ? random(0...3) : random(4...400)
            let statements = [Change(sql: "UPDATE note SET n = n + ?, body = substr(body, ?) || ? WHERE id BETWEEN ? AND ?",
                                        arguments: [random(1...9), random(1...40), " edited \(context)", start, start + width]),
                              Change(sql: "UPDATE note SET n = -n WHERE id = ?", arguments: [first])]
            try await apply(chance(50) ? statements : [statements[0]])
        case .insertNotes:
            let top = try await ask { db in try Int.fetchOne(db, sql: "SELECT max(id) FROM note") ?? 0 }
            let count = chance(70) ? random(1...5) : random(50...300)
            let statements = (1...count).map { offset in
                Change(sql: "INSERT INTO note(id, body, n) VALUES (?, ?, ?)",
                          arguments: [top + offset, words(random(5...400), &generator), offset])
            }
            try await apply(statements)
        case .deleteNotes:
            let ids = try await ask { db in try Int.fetchAll(db, sql: "SELECT id FROM note ORDER BY id") }
            guard !ids.isEmpty else { return try await step(.insertNotes) }
            let start = ids[random(0...(ids.count - 1))]
            let width = chance(80) ? random(0...5) : random(20...300)
            try await apply([Change(sql: "DELETE FROM note WHERE id BETWEEN ? AND ?", arguments: [start, start + width])])
        default: preconditionFailure("\(kind) is not a step on notes")
        }
    }

    /// A table created or dropped, a column added, or rows of a table changed.
    private func changeTables(_ kind: Kind) async throws {
        switch kind {
        case .createTable:
            let name = "t\(random(0...9999))"
            guard try await !extraTables().contains(name) else { return try await step(.tableRows) }
            var statements = [Change(sql: "CREATE TABLE \(name)(id INTEGER PRIMARY KEY, a TEXT, b INTEGER)")]
            if chance(50) { statements.append(Change(sql: "CREATE INDEX \(name)_b ON \(name)(b)")) }
            if chance(70) {
                statements += (0..<random(1...60)).map { index in
                    Change(sql: "INSERT INTO \(name)(a, b) VALUES (?, ?)", arguments: [words(random(1...40), &generator), index])
                }
            }
            if chance(20) { statements.append(Change(sql: "PRAGMA user_version = \(random(1...1000))")) }
            try await apply(statements)
        case .dropTable:
            let tables = try await extraTables()
            guard !tables.isEmpty else { return try await step(.createTable) }
            try await apply([Change(sql: "DROP TABLE \(tables[random(0...(tables.count - 1))])")])
        case .addColumn:
            let tables = try await extraTables() + ["note"]
            let table = tables[random(0...(tables.count - 1))]
            let column = "c\(random(0...9999))"
            let columns = try await ask { db in try db.columns(in: table).map(\.name) }
            guard !columns.contains(column) else { return }
            let type = chance(50) ? "TEXT DEFAULT 'default \(column)'" : "INTEGER"
            var statements = [Change(sql: "ALTER TABLE \(table) ADD COLUMN \(column) \(type)")]
            if chance(50) {
                statements.append(Change(sql: "UPDATE \(table) SET \(column) = ? WHERE id % 7 = ?",
                                            arguments: [words(2, &generator), random(0...6)]))
            }
            try await apply(statements)
        case .tableRows:
            let tables = try await extraTables()
            guard !tables.isEmpty else { return try await step(.createTable) }
            let table = tables[random(0...(tables.count - 1))]
            switch random(0...2) {
            case 0:
                try await apply((0..<random(1...30)).map { index in
                    Change(sql: "INSERT INTO \(table)(a, b) VALUES (?, ?)", arguments: [words(random(1...60), &generator), index])
                })
            case 1:
                try await apply([Change(sql: "UPDATE \(table) SET b = b + 1, a = a || 'x' WHERE id % 3 = ?", arguments: [random(0...2)])])
            default:
                try await apply([Change(sql: "DELETE FROM \(table) WHERE id % 4 = ?", arguments: [random(0...3)])])
            }
        default: preconditionFailure("\(kind) is not a step on tables")
        }
    }

    /// A large blob inserted or deleted, a VACUUM, or a write that throws.
    private func changeBlobsOrPages(_ kind: Kind) async throws {
        switch kind {
        case .insertBlob:
            let data = noise(random(100 << 10...600 << 10), &generator)
            try await apply([Change(sql: "INSERT INTO blob(data) VALUES (?)", arguments: [data])])
        case .deleteBlob:
            let ids = try await ask { db in try Int.fetchAll(db, sql: "SELECT id FROM blob ORDER BY id") }
            guard !ids.isEmpty else { return try await step(.insertBlob) }
            if chance(25) {
                try await apply([Change(sql: "DELETE FROM blob")])
            } else {
                try await apply([Change(sql: "DELETE FROM blob WHERE id = ?", arguments: [ids[random(0...(ids.count - 1))]])])
            }
        case .vacuum:
            try await document.writer.writeWithoutTransaction { db in try db.execute(sql: "VACUUM") }
            try await current.vacuum()
            vacuumUnsaved = true
        case .failedWrite:
            // A transaction that throws: rolled back, nothing to save.
            let before = document.state
            do {
                try await document.writer.write { db in
                    try db.execute(sql: "DELETE FROM note")
                    try db.execute(sql: "INSERT INTO blob(data) VALUES (zeroblob(300000))")
                    throw Failure(description: "rolled back")
                }
                throw fail("the failing write did not throw")
            } catch let error as Failure where error.description == "rolled back" {}
            guard document.state == before else { throw fail("a rolled-back write changed the state: \(before) -> \(document.state)") }
        default: preconditionFailure("\(kind) is not a step on blobs or pages")
        }
    }

    /// A save, a revert, a close (then an open), autosave, or a writer killed and recovered.
    private func saveOrClose(_ kind: Kind) async throws {
        switch kind {
        case .save:
            try await save()
        case .saveTwice:
            try await save()
            try await save()
            // > Nothing changed between the two: the second copies every segment it can.
            if let report = document.lastSave, report.mode != .incremental || report.deflatedSegments > 1 {
                Issue.record("\(context): the second of two saves in a row: \(report)")
            }
        case .saveThenRevert:
            try await save()
            try await document.revert()
            try markReverted()
            guard document.state == .normal else { throw fail("after a revert: \(document.state)") }
        case .revert:
            try await document.revert()
            try markReverted()
            guard document.state == .normal else { throw fail("after a revert: \(document.state)") }
        case .autosave:
            // Closed (saving or not), opened again with autosave, one change, saved by itself.
            try await close(savingChanges: chance(50))
            try await reopen(autosave: 0.1)
            try await step(chance(50) ? .updateNotes : .insertNotes)
            let deadline = Date().addingTimeInterval(30)
            while document.state != .normal, Date() < deadline { try await Task.sleep(nanoseconds: 20_000_000) }
            guard document.state == .normal, document.lastSave != nil else {
                throw fail("not autosaved in 30 s: \(document.state), \(String(describing: document.lastSaveError))")
            }
            countSave()
            try markSaved()
            try await check()
            try await close(savingChanges: chance(50))
            try await reopen()
        case .closeSaving:
            try await close(savingChanges: true)
            try await reopen()
        case .closeDiscarding:
            try await close(savingChanges: false)
            try await reopen()
        case .kill:
            try await killAndRecover()
        default: preconditionFailure("\(kind) is not a save or a close")
        }
    }

    /// Closes the document, runs `notes-app journal` on the bundle, kills it (SIGKILL) after a random number of
    /// entries committed, and opens the bundle again with `.recover`: the bundle is the previous save or one of the
    /// app's, and recovery has every entry whose commit the app reported and at most the one after it.
    func killAndRecover() async throws {
        try await close(savingChanges: chance(50))
        let before = try await ask { db in try Int.fetchOne(db, sql: "SELECT max(id) FROM entry") ?? 0 }
        let saveEvery = [0, 2, 3, 5, 8][random(0...4)]
        let target = random(0...24)
        let pause = chance(50) ? UInt64(random(0...30)) * 1_000_000 : 0
        let app = try NotesApp([bundle.string, "journal", "--rows", "400", "--save-every", "\(saveEvery)", "--echo"], in: folder)
        let reached = app.waitFor(target == 0 ? "opened" : "committed \(before + target)\n")
        if pause > 0 { try await Task.sleep(nanoseconds: pause) }
        kill(app.process.processIdentifier, SIGKILL)
        let (status, output) = app.finish()
        guard reached, status != 0 else { throw fail("notes-app ended by itself (\(status)): \(output.suffix(600))") }
        let committed = output.split(separator: "\n").compactMap { line -> Int? in
            line.hasPrefix("committed ") ? Int(line.dropFirst("committed ".count)) : nil
        }.max() ?? before
        context += " [journal --save-every \(saveEvery), killed after entry \(before + target) + \(pause / 1_000_000) ms, last committed \(committed)]"

        // The bundle: a whole save, the previous one or one of the app's.
        _ = try BundleReader(at: bundle).verify(full: true, workingDirectory: folder)
        let inBundle = try await readBundle { db in try journalIDs(db) }
        guard let inBundle else { throw fail("an entry in the bundle does not match its payload") }
        let savedTop = inBundle.last ?? 0
        guard inBundle == Array(stride(from: 1, through: savedTop, by: 1)), savedTop >= before, savedTop <= committed,
              savedTop == before || (saveEvery > 0 && savedTop % saveEvery == 0)
        else { throw fail("the bundle holds entries up to \(savedTop): not a save (before \(before))") }
        try await saved.write { db in try Run.appendEntries(db, from: before + 1, through: savedTop) }
        try await current.write { db in try Run.appendEntries(db, from: before + 1, through: savedTop) }
        if savedTop > before { kills.bundleAdvanced += 1 }

        // Recovery: every committed entry, and at most the one that was committing.
        document = try await Document.open(at: bundle, options: Run.options(folder))
        guard let recovered = try await document.reader.read({ db in try journalIDs(db) }) else {
            throw fail("a recovered entry does not match its payload")
        }
        let top = recovered.last ?? 0
        guard recovered == Array(stride(from: 1, through: top, by: 1)), top >= committed, top <= committed + 1, top >= savedTop
        else { throw fail("recovered entries up to \(top) (\(recovered.count)), the bundle has \(savedTop)") }
        try await current.write { db in try Run.appendEntries(db, from: savedTop + 1, through: top) }
        if top > savedTop {
            kills.recoveredUnsaved += 1
            guard document.state == .hasUnsavedChanges else { throw fail("recovered unsaved entries, but \(document.state)") }
        }
    }

    static func appendEntries(_ db: Database, from first: Int, through last: Int) throws {
        guard first <= last else { return }
        for id in first...last {
            try db.execute(sql: "INSERT INTO entry(id, text, payload) VALUES (?, ?, ?)",
                           arguments: [id, "entry \(id)", journalPayload(id)])
        }
    }

    /// Runs `body` on a read-only open of the bundle.
    func readBundle<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        var options = appOptions(folder)
        options.isReadOnly = true
        options.createIfMissing = false
        options.workingDirectory = folder.appending("readers")
        let reader = try await Document.open(at: bundle, options: options)
        let result = try await reader.reader.read(body)
        try await reader.close()
        return result
    }

    /// The document holds the model's current content, the bundle its saved content.
    func check() async throws {
        let expectedNow = try await current.read { db in try StoreContent(db, rowIDs: true) }
        let now = try await document.reader.read { db in try StoreContent(db, rowIDs: true) }
        guard now == expectedNow else { throw fail("the document differs from the model: \(now.difference(from: expectedNow))") }
        let expectedSaved = try await saved.read { db in try StoreContent(db, rowIDs: true) }
        let inBundle = try await readBundle { db in try StoreContent(db, rowIDs: true) }
        guard inBundle == expectedSaved else { throw fail("the bundle differs from the last save: \(inBundle.difference(from: expectedSaved))") }
        let unsaved = expectedNow != expectedSaved
        // > Equal content can still be unsaved (a VACUUM, a row changed and changed back): only unsaved content is
        // > sure to show as unsaved.
        if unsaved, !document.hasUnsavedChanges { throw fail("unsaved content, but \(document.state)") }
    }
}

@Suite("Writable documents served from the bundle: random steps against a model")
struct WritableRandomStepsTests {
    @Test("rows, DDL, large blobs, VACUUM, saves, reverts, autosaves, closes and SIGKILLs: after every step the document equals the model, the bundle the last save")
    func randomSteps() async throws {
        let environment = ProcessInfo.processInfo.environment
        let seed = UInt64(environment["WRITABLE_STEPS_SEED"] ?? "") ?? 20261126
        let count = Int(environment["WRITABLE_STEPS_COUNT"] ?? "") ?? 40
        print("writable-steps: seed \(seed), \(count) steps (WRITABLE_STEPS_SEED, WRITABLE_STEPS_COUNT)")
        let started = Date()
        try await withTemporaryDirectory { folder in
            let run = try await Run(seed: seed, folder: folder)
            run.context = "seed \(seed) setup"
            try await run.check()
            for index in 0..<count {
                // > Every kind at least once when there are steps enough: the last steps take those not drawn yet.
                let unseen = Kind.allCases.filter { run.kinds[$0] == nil }
                let kind = unseen.count >= count - index ? unseen[run.random(0...(unseen.count - 1))] : Kind.pick(&run.generator)
                run.context = "seed \(seed) step \(index) (\(kind.rawValue))"
                run.kinds[kind, default: 0] += 1
                do {
                    try await run.step(kind)
                    try await run.check()
                } catch {
                    // > The run stops at its first failure: the steps after it would test another model.
                    Issue.record("\(run.context): \(error)")
                    return
                }
            }
            run.context = "seed \(seed) end"
            try await run.close(savingChanges: true)
            _ = try BundleReader(at: run.bundle).verify(full: true, workingDirectory: folder)
            let expected = try await run.saved.read { db in try StoreContent(db, rowIDs: true) }
            let inBundle = try await run.readBundle { db in try StoreContent(db, rowIDs: true) }
            #expect(inBundle == expected, "\(run.context): \(inBundle.difference(from: expected))")

            let steps = Kind.allCases.compactMap { kind in run.kinds[kind].map { "\(kind.rawValue) \($0)" } }
            print("writable-steps: seed \(seed), \(count) steps in \(String(format: "%.1f", Date().timeIntervalSince(started))) s: "
                  + steps.joined(separator: ", "))
            print("writable-steps: saves \(run.saves.incremental) incremental, \(run.saves.full) full \(run.fullReasons); "
                  + "kills: the bundle advanced in \(run.kills.bundleAdvanced), recovery had unsaved entries in \(run.kills.recoveredUnsaved)")
            let explicitSaves = [Kind.save, .saveTwice, .saveThenRevert, .autosave].reduce(0) { $0 + (run.kinds[$1] ?? 0) }
            if explicitSaves > 0 { #expect(run.saves.incremental > 0, "seed \(seed): no incremental save") }
            if run.savesAfterVacuum > 0 { #expect(run.saves.full > 0, "seed \(seed): no full save") }
        }
    }
}
