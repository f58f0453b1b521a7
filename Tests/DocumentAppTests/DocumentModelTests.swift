import Foundation
import GRDB
import ManagedDocument
import SystemPackage
import TestSupport
import Testing

/// What a store holds, as the property test models it.
private struct Snapshot: Equatable, CustomStringConvertible {
    var items: [Int64: Int64] = [:]
    var tables: Set<String> = []
    var userVersion: Int64 = 0

    init() {}

    init(_ db: Database) throws {
        for row in try Row.fetchAll(db, sql: "SELECT id, v FROM item") { items[row[0]] = row[1] }
        tables = Set(try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'extra%'"))
        userVersion = try Int64.fetchOne(db, sql: "PRAGMA user_version") ?? 0
    }

    var description: String { "\(items.count) items, tables \(tables.sorted()), user_version \(userVersion)" }
}

/// What the model test keeps beside the documents: what the bundle (`saved`) and the open document (`working`) must
/// hold, and the steps that change them.
private struct ModelRun {
    let bundle: FilePath
    let options: Document.OpenOptions
    var saved: Snapshot
    var working: Snapshot
    var dirty: Bool? = false  // nil: only VACUUMs since the last save (the file changed, the content did not)
    var live: Document
    var stale: [Document] = []
    var nextID: Int64 = 1

    /// Takes step `step`, chosen by `roll` (0..<100): an edit, or a save, revert, close or open. Its name, or `nil`
    /// when it found nothing to act on.
    mutating func step(_ step: Int, roll: Int, context: String, _ generator: inout SeededGenerator) async throws
        -> String? {
        if roll < 55 { return try await edit(step, roll: roll, &generator) }
        return try await lifecycle(roll: roll, context: context, &generator)
    }

    /// An insert, update, delete, schema change, pragma or VACUUM in the open document.
    private mutating func edit(_ step: Int, roll: Int, _ generator: inout SeededGenerator) async throws -> String? {
        let operation: String
        switch roll {
        case 0..<25:
            operation = "insert"
            let (id, value) = (nextID, Int64.random(in: 0..<1000, using: &generator))
            nextID += 1
            try await live.writer.write { db in try db.execute(sql: "INSERT INTO item VALUES (?, ?)", arguments: [id, value]) }
            working.items[id] = value
            dirty = true
        case 25..<35:
            operation = "update"
            guard let id = working.items.keys.randomElement(using: &generator) else { return nil }
            let value = (working.items[id] ?? 0) + 1
            try await live.writer.write { db in try db.execute(sql: "UPDATE item SET v = ? WHERE id = ?", arguments: [value, id]) }
            working.items[id] = value
            dirty = true
        case 35..<42:
            operation = "delete"
            guard let id = working.items.keys.randomElement(using: &generator) else { return nil }
            try await live.writer.write { db in try db.execute(sql: "DELETE FROM item WHERE id = ?", arguments: [id]) }
            working.items[id] = nil
            dirty = true
        case 42..<48:
            operation = "schema"
            if let table = working.tables.randomElement(using: &generator), Bool.random(using: &generator) {
                try await live.writer.write { db in try db.execute(sql: "DROP TABLE \(table)") }
                working.tables.remove(table)
            } else {
                let table = "extra\(step)"
                try await live.writer.write { db in try db.execute(sql: "CREATE TABLE \(table)(x)") }
                working.tables.insert(table)
            }
            dirty = true
        case 48..<52:
            operation = "pragma"
            let version = working.userVersion + Int64.random(in: 1...5, using: &generator)
            try await live.writer.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA user_version = \(version)") }
            working.userVersion = version
            dirty = true
        default:
            operation = "vacuum"
            try await live.writer.writeWithoutTransaction { db in try db.execute(sql: "VACUUM") }
            if dirty == false { dirty = nil }
        }
        return operation
    }

    /// A save, revert or close of the open document (then the other document opened, in turn), a close, save or
    /// revert of one closed before, or a second writer refused.
    private mutating func lifecycle(roll: Int, context: String, _ generator: inout SeededGenerator) async throws
        -> String? {
        switch roll {
        case 55..<67:
            try await live.save()
            saved = working
            dirty = false
            return "save"
        case 67..<75:
            try await live.revert()
            working = saved
            dirty = false
            return "revert"
        case 75..<83:
            let saving = Bool.random(using: &generator)
            try await live.close(savingChanges: saving)
            #expect(live.state == .closed, "\(context)")
            if saving { saved = working } else { working = saved }
            stale.append(live)
            live = try await Document.open(at: bundle, options: options)  // the other document, in turn
            dirty = false
            return saving ? "close, saving" : "close, discarding"
        case 83..<91:
            guard let old = stale.randomElement(using: &generator) else { return nil }
            try await old.close(savingChanges: Bool.random(using: &generator))
            #expect(old.state == .closed, "\(context)")
            return "stale close"
        case 91..<95:
            guard let old = stale.randomElement(using: &generator) else { return nil }
            let saving = Bool.random(using: &generator)
            let error = await #expect(throws: DocumentError.self, "\(context)") {
                if saving { try await old.save() } else { try await old.revert() }
            }
            #expect(error?.code == .closed, "\(context)")
            return "stale save or revert"
        default:
            let error = await #expect(throws: DocumentError.self, "\(context)") {
                _ = try await Document.open(at: bundle, options: options)
            }
            #expect(error?.code == .inUse, "\(context)")
            return "second writer refused"
        }
    }
}

@Suite("A model of what must be there, checked after every step of random edits, saves, reverts and closes")
struct DocumentModelTests {
    @Test("two documents on one bundle path in turn: the bundle and the state always match the model")
    func interleavedOpens() async throws {
        let seed = UInt64(ProcessInfo.processInfo.environment["DOCUMENT_MODEL_SEED"] ?? "") ?? 20261124
        let steps = Int(ProcessInfo.processInfo.environment["DOCUMENT_MODEL_STEPS"] ?? "") ?? 160
        var generator = SeededGenerator(seed: seed)
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Model.mdz")
            var options = appOptions(folder)
            options.lockTimeout = 0
            let first = try await Document.open(at: bundle, options: options)
            try await first.writer.write { db in try db.execute(sql: "CREATE TABLE item(id INTEGER PRIMARY KEY, v INTEGER)") }
            try await first.save()

            let saved = try await bundleSnapshot(bundle, folder: folder)
            var run = ModelRun(bundle: bundle, options: options, saved: saved, working: saved, live: first)
            var counts: [String: Int] = [:]
            for step in 0..<steps {
                let roll = Int.random(in: 0..<100, using: &generator)
                let context = "seed \(seed) step \(step)"
                guard let operation = try await run.step(step, roll: roll, context: context, &generator) else { continue }
                counts[operation, default: 0] += 1
                guard try await matchesModel(run, "\(context) after \(operation)", folder: folder) else { break }
            }
            try await run.live.close()
            #expect(try await bundleSnapshot(bundle, folder: folder) == run.working)
            print("model steps (seed \(seed)): \(counts.sorted { $0.key < $1.key })")
        }
    }

    /// After every step: the bundle holds the last save, the open document its working state, and the state says
    /// whether they differ. False when the bundle or the document does not match (one failure tells the story).
    private func matchesModel(_ run: ModelRun, _ context: String, folder: FilePath) async throws -> Bool {
        let onDisk = try await bundleSnapshot(run.bundle, folder: folder)
        #expect(onDisk == run.saved, "\(context): bundle \(onDisk), expected \(run.saved)")
        let inDocument = try await run.live.reader.read { db in try Snapshot(db) }
        #expect(inDocument == run.working, "\(context): document \(inDocument), expected \(run.working)")
        if let dirty = run.dirty {
            #expect(run.live.state == (dirty ? .hasUnsavedChanges : .normal), "\(context): \(run.live.state)")
        }
        return onDisk == run.saved && inDocument == run.working
    }

    private func bundleSnapshot(_ bundle: FilePath, folder: FilePath) async throws -> Snapshot {
        var options = appOptions(folder)
        options.isReadOnly = true
        let reader = try await Document.open(at: bundle, options: options)
        let snapshot = try await reader.reader.read { db in try Snapshot(db) }
        try await reader.close()
        return snapshot
    }
}
