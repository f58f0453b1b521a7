// A writable document loses no committed transaction: under every `synchronous` setting, after a save whose overlay
// was not laid over the new bundle, under other reading limits, when the bundle's times move, with ATTACH and VACUUM
// INTO. An app's view: the public API, and `notes-app sql` killed with SIGKILL.
import Foundation
import GRDB
import GRDBSQLite
import ManagedDocument
import SystemPackage
import Testing
import TestSupport

/// A table whose rows are made by SQL alone, so a model database can replay the same steps.
private let schema = "CREATE TABLE t(id INTEGER PRIMARY KEY, n INTEGER NOT NULL, body TEXT NOT NULL)"

/// Inserts rows `first ... last`, each of `width` characters made from its id, in one statement.
private func insert(_ first: Int, _ last: Int, width: Int = 200) -> String {
    "WITH RECURSIVE r(i) AS (SELECT \(first) UNION ALL SELECT i + 1 FROM r WHERE i < \(last)) "
        + "INSERT INTO t(id, n, body) SELECT i, i * 7, replace(hex(zeroblob(\(width / 2))), '0', char(65 + i % 26)) FROM r"
}

/// The content SQL `steps` give a plain SQLite file (saves, reverts and queries left out): what a recovered document
/// must hold.
private func model(_ steps: [String], in folder: FilePath) throws -> StoreContent {
    let path = folder.appending("model-\(UUID().uuidString).sqlite")
    let queue = try DatabaseQueue(path: path.string)
    defer { try? queue.close() }
    for step in steps where step != "save" && step != "revert" && !step.hasPrefix("?") {
        try queue.writeWithoutTransaction { db in try db.execute(sql: step) }
    }
    return try queue.read { db in try StoreContent(db) }
}

/// Runs `notes-app sql` on `bundle` with `steps`, waits until it ran them all, and kills it (SIGKILL).
private func runAndKill(_ bundle: FilePath, _ steps: [String], in folder: FilePath, options: [String] = [])
throws -> String {
    let app = try NotesApp([bundle.string, "sql"] + steps + ["--hold", "120"] + options, in: folder)
    let ready = app.waitFor("ready")
    kill(app.process.processIdentifier, SIGKILL)
    let output = app.finish().output
    #expect(ready, "the app did not run its steps: \(output)")
    return output
}

/// Runs `notes-app sql` on `bundle` with `steps` to its end (it closes without saving after them).
private func runToEnd(_ bundle: FilePath, _ steps: [String], in folder: FilePath) throws {
    let result = try NotesApp.run([bundle.string, "sql"] + steps, in: folder)
    #expect(result.status == 0, "\(result.output)")
}

/// Opens `bundle` for writing with `.recover`, as the app that died would, and reads its content.
private func recovered(_ bundle: FilePath, folder: FilePath, limits: ReadingLimits = ReadingLimits())
async throws -> (content: StoreContent, state: Document.State, integrity: String) {
    var options = appOptions(folder)
    options.workingDirectory = childWorkingDirectory(folder)
    options.recovery = .recover
    options.limits = limits
    let document = try await Document.open(at: bundle, options: options)
    let (content, integrity) = try await document.reader.read { db in
        (try StoreContent(db), try String.fetchOne(db, sql: "PRAGMA integrity_check") ?? "")
    }
    let state = document.state
    try await document.close(savingChanges: true)
    _ = try BundleReader(at: bundle).verify(full: true, workingDirectory: folder)
    return (content, state, integrity)
}

@Suite("Writable documents lose no committed transaction: synchronous settings, saves not laid over, other limits, moved times, ATTACH")
struct LoseNothingTests {
    @Test("PRAGMA synchronous = OFF: every commit survives a SIGKILL (SQLite's promise for OFF: an application crash loses nothing)")
    func synchronousOff() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Doc.mdz")
            let saved = [schema, insert(1, 50), "save"]
            try runToEnd(bundle, saved, in: folder)
            let commits = (51...70).map { "INSERT INTO t(id, n, body) VALUES (\($0), \($0), 'off \($0)')" }
            let steps = ["PRAGMA synchronous = OFF"] + commits
            _ = try runAndKill(bundle, steps, in: folder)
            let result = try await recovered(bundle, folder: folder)
            #expect(result.integrity == "ok")
            let expected = try model(saved + steps, in: folder)
            #expect(result.content == expected, "\(result.content.difference(from: expected))")
            #expect(result.state == .hasUnsavedChanges)
        }
    }

    @Test("synchronous = OFF after other commits, then hundreds of inserts and deletes: whole and every commit there after a SIGKILL")
    func synchronousOffChurn() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Doc.mdz")
            let saved = [schema, insert(1, 50), "save"]
            try runToEnd(bundle, saved, in: folder)
            var steps = (51...80).map { "INSERT INTO t(id, n, body) VALUES (\($0), 1, 'before \($0)')" }
            steps.append("PRAGMA synchronous = OFF")
            for index in 0..<300 {
                steps.append("INSERT INTO t(id, n, body) VALUES (\(1000 + index), \(index), '\(String(repeating: "x", count: 300))')")
                steps.append("DELETE FROM t WHERE id = \(1000 + index - (index % 3 == 0 ? 0 : 1))")
            }
            _ = try runAndKill(bundle, steps, in: folder)
            let result = try await recovered(bundle, folder: folder)
            #expect(result.integrity == "ok")
            let expected = try model(saved + steps, in: folder)
            #expect(result.content == expected, "\(result.content.difference(from: expected))")
        }
    }

    @Test("every synchronous setting and journal mode: every commit survives a SIGKILL", arguments: [
        ["PRAGMA synchronous = NORMAL"], ["PRAGMA synchronous = FULL"], ["PRAGMA synchronous = EXTRA"],
        ["PRAGMA journal_mode = TRUNCATE"], ["PRAGMA journal_mode = PERSIST"], ["PRAGMA journal_mode = MEMORY"],
        ["PRAGMA journal_mode = OFF"], ["PRAGMA synchronous = OFF", "PRAGMA journal_mode = MEMORY"],
        ["PRAGMA locking_mode = EXCLUSIVE"], ["PRAGMA cache_size = 2"], ["PRAGMA temp_store = FILE"],
        ["PRAGMA mmap_size = 1048576"],
    ])
    func modes(_ settings: [String]) async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Doc.mdz")
            let saved = [schema, insert(1, 50), "save"]
            try runToEnd(bundle, saved, in: folder)
            var steps = settings
            for id in 51...90 { steps.append("INSERT INTO t(id, n, body) VALUES (\(id), \(id), 'mode \(id)')") }
            steps.append("UPDATE t SET n = n + 1 WHERE id % 5 = 0")
            steps.append(insert(200, 400, width: 1000))  // more pages than a tiny cache holds: spilled mid-transaction
            steps.append("DELETE FROM t WHERE id BETWEEN 300 AND 350")
            _ = try runAndKill(bundle, steps, in: folder)
            let result = try await recovered(bundle, folder: folder)
            #expect(result.integrity == "ok", "\(settings)")
            let expected = try model(saved + steps, in: folder)
            #expect(result.content == expected, "\(settings): \(result.content.difference(from: expected))")
        }
    }

    @Test("a save whose bundle is not served in place, then a commit that writes only pages the overlay holds, then SIGKILL: recovery has the commit")
    func saveNotLaidOverThenRewrite() async throws {
        try await savedNotLaidOver(then: "UPDATE t SET n = n + 1000 WHERE id = 260")
    }

    @Test("a save whose bundle is not served in place, then a commit that adds pages, then SIGKILL: recovery has the commit")
    func saveNotLaidOverThenGrow() async throws {
        try await savedNotLaidOver(then: insert(600, 640, width: 2000))
    }

    /// A ~330 KB document served whole in place under a 512 KiB limit, grown past it (so the saved bundle is not
    /// served in place, and the overlay is not laid over it), saved, changed by `change`, killed.
    private func savedNotLaidOver(then change: String) async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Doc.mdz")
            let saved = [schema, insert(1, 150, width: 2000), "save"]
            try runToEnd(bundle, saved, in: folder)
            let steps = [insert(151, 400, width: 2000), "save", change]
            let output = try runAndKill(bundle, steps, in: folder, options: ["--max-restart-segment-size", "524288"])
            #expect(output.contains("step 3"), "\(output)")
            let expected = try model(saved + steps, in: folder)
            for limits in [ReadingLimits(), { var small = ReadingLimits(); small.maxRestartSegmentSize = 512 << 10; return small }()] {
                // > The first open recovers and saves; the second finds the saved bundle: both must hold the commit.
                let result = try await recovered(bundle, folder: folder, limits: limits)
                #expect(result.integrity == "ok")
                #expect(result.content == expected, "\(result.content.difference(from: expected))")
            }
        }
    }

    @Test("a crashed working copy of an unchanged bundle, reopened with other reading limits: every commit recovered")
    func otherLimits() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Doc.mdz")
            let saved = [schema, insert(1, 600, width: 3000), "save"]
            try runToEnd(bundle, saved, in: folder)
            let steps = ["UPDATE t SET n = -n WHERE id % 3 = 0", insert(700, 720)]
            _ = try runAndKill(bundle, steps, in: folder)
            var limits = ReadingLimits()
            limits.maxRestartSegmentSize = 64 << 10
            limits.maxDigestSegmentSize = 64 << 10
            let result = try await recovered(bundle, folder: folder, limits: limits)
            #expect(result.state == .hasUnsavedChanges)
            let expected = try model(saved + steps, in: folder)
            #expect(result.content == expected, "\(result.content.difference(from: expected))")
        }
    }

    @Test("a bundle whose times moved but whose bytes did not (a file system that reports times from elsewhere): recovery has every commit")
    func timesMoved() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Doc.mdz")
            let saved = [schema, insert(1, 100), "save"]
            try runToEnd(bundle, saved, in: folder)
            let steps = [insert(101, 120)]
            _ = try runAndKill(bundle, steps, in: folder)
            var times = [timespec(tv_sec: 1_000_000_000, tv_nsec: 61_000_000), timespec(tv_sec: 1_000_000_000, tv_nsec: 61_000_000)]
            #expect(utimensat(AT_FDCWD, bundle.string, &times, 0) == 0)
            let result = try await recovered(bundle, folder: folder)
            let expected = try model(saved + steps, in: folder)
            #expect(result.content == expected, "\(result.content.difference(from: expected))")
        }
    }

    @Test("a store made smaller and grown again many times between saves: the page map stays bounded, and recovery has every commit")
    func mapBounded() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Doc.mdz")
            let saved = [schema, insert(1, 50), "save"]
            try runToEnd(bundle, saved, in: folder)
            // > With auto_vacuum = FULL every commit that frees pages makes the file smaller.
            var steps = ["PRAGMA auto_vacuum = FULL", "VACUUM"]
            for cycle in 0..<40 {
                steps.append("INSERT INTO t(id, n, body) VALUES (100000, \(cycle), hex(zeroblob(2000000)))")
                steps.append("DELETE FROM t WHERE id = 100000")
            }
            steps.append(insert(51, 60))
            _ = try runAndKill(bundle, steps, in: folder)
            let maps = try FileManager.default.subpathsOfDirectory(atPath: childWorkingDirectory(folder).string)
                .filter { $0.hasSuffix("/map") }
            #expect(maps.count == 1, "\(maps)")
            for map in maps {
                let size = try #require(try FileManager.default.attributesOfItem(
                    atPath: childWorkingDirectory(folder).appending(map).string)[.size] as? Int)
                // > Without compaction: about 320 KiB (40 cycles recording 1,000 pages each).
                #expect(size <= 300 << 10, "the map holds \(size) bytes after 40 cycles of 1,000 pages")
            }
            let result = try await recovered(bundle, folder: folder)
            #expect(result.integrity == "ok")
            let expected = try model(saved + steps, in: folder)
            #expect(result.content == expected, "\(result.content.difference(from: expected))")
        }
    }

    @Test("a working copy made through a symbolically linked folder is found through the real one, and the other way round")
    func symbolicallyLinkedParent() async throws {
        try await withTemporaryDirectory { folder in
            // > The bundle's own folder may not be a link (a save refuses it); a folder above it may.
            let real = folder.appending("real").appending("docs")
            let link = folder.appending("link").appending("docs")
            try FileManager.default.createDirectory(atPath: real.string, withIntermediateDirectories: true)
            #expect(symlink(folder.appending("real").string, folder.appending("link").string) == 0)
            let saved = [schema, insert(1, 50), "save"]
            try runToEnd(real.appending("Doc.mdz"), saved, in: folder)
            let first = [insert(51, 60)]
            _ = try runAndKill(link.appending("Doc.mdz"), first, in: folder)
            let second = [insert(61, 70)]
            _ = try runAndKill(real.appending("Doc.mdz"), second + ["?SELECT count(*) FROM t"], in: folder,
                               options: ["--recover"])
            let result = try await recovered(link.appending("Doc.mdz"), folder: folder)
            let expected = try model(saved + first + second, in: folder)
            #expect(result.content == expected, "\(result.content.difference(from: expected))")
        }
    }

    @Test("a super-journal SQLite left in a working copy (a transaction over attached databases cut short) outlives the close and a discarding open (SQLite removes it once it resolved the attached journal)")
    func superJournalKept() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Doc.mdz")
            let aux = folder.appending("aux.sqlite")
            // > A transaction over the store and an attached file, cut short by a kill after both journals and the
            // > super-journal were written: made here by hand, as SQLite lays it out (sqlite.org/atomiccommit.html).
            let document = try await Document.open(at: bundle, options: appOptions(folder))
            try await document.writer.write { db in try db.execute(sql: schema) }
            let working = try #require(try FileManager.default.subpathsOfDirectory(atPath: folder.appending("working").string)
                .first { $0.hasSuffix("/map") }.map { folder.appending("working").appending($0).removingLastComponent() })
            let superJournal = working.appending("overlay-mj0A1B2C3D")
            try Data("\(aux.string)-journal\u{0}".utf8).write(to: URL(fileURLWithPath: superJournal.string))
            try await document.close()
            #expect(FileManager.default.fileExists(atPath: superJournal.string), "the close removed the super-journal")
            let reopened = try await Document.open(at: bundle, options: appOptions(folder))
            #expect(FileManager.default.fileExists(atPath: superJournal.string), "a discarding open removed the super-journal")
            try await reopened.close()
        }
    }

    @Test("ATTACH and VACUUM INTO on a writable document: other databases open, written and read through the default VFS")
    func attachAndVacuumInto() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Doc.mdz")
            let document = try await Document.open(at: bundle, options: appOptions(folder))
            let other = folder.appending("other.sqlite")
            let copy = folder.appending("copy.sqlite")
            try await document.writer.writeWithoutTransaction { db in
                try db.execute(sql: schema)
                try db.execute(sql: insert(1, 300))
                try db.execute(sql: "ATTACH DATABASE ? AS aux", arguments: [other.string])
                try db.execute(sql: "CREATE TABLE aux.tag(name TEXT)")
                try db.execute(sql: "INSERT INTO aux.tag SELECT body FROM main.t WHERE id <= 10")
                try db.execute(sql: "DETACH DATABASE aux")
                try db.execute(sql: "VACUUM INTO ?", arguments: [copy.string])
            }
            let expected = try await document.reader.read { db in try StoreContent(db) }
            try await document.save()
            try await document.close()
            let vacuumed = try DatabaseQueue(path: copy.string)
            #expect(try await vacuumed.read { db in try StoreContent(db) } == expected)
            try vacuumed.close()
            let attached = try DatabaseQueue(path: other.string)
            #expect(try await attached.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM tag") } == 10)
            try attached.close()
            #expect(try await bundleContent(bundle, folder: folder) == expected)
        }
    }

    @Test("loading an extension on a writable document's connection goes through the default VFS: a missing library is an error, not a crash")
    func extensionLoading() async throws {
        try await withTemporaryDirectory { folder in
            let document = try await Document.open(at: folder.appending("Doc.mdz"), options: appOptions(folder))
            let error = await #expect(throws: DatabaseError.self) {
                try await document.writer.writeWithoutTransaction { db in
                    #expect(sqlite3_enable_load_extension(db.sqliteConnection, 1) == SQLITE_OK)
                    try db.execute(sql: "SELECT load_extension(?)", arguments: [folder.appending("missing.so").string])
                }
            }
            #expect(error?.message?.contains("missing.so") == true, "\(String(describing: error))")
            try await document.close()
        }
    }
}
