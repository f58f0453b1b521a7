// The mode matrix of writable documents under SIGKILL (docs/RELIABILITY.md, "Mode matrix"): for each SQLite setting
// an app may choose, `notes-app sql` runs a fixed list of steps (each one transaction, a pragma, or a save) and is
// killed at a random moment while it runs them; the document, recovered through the public API, must hold every
// commit the app reported (`step N`) and at most the one in flight, whole (`PRAGMA integrity_check`), and a read-only
// open must find the last save it reported. Where SQLite promises nothing for a kill inside a transaction
// (journal_mode = MEMORY and OFF) the app pauses after each step and is killed in a pause: between two transactions.
//
// Reproduce or extend: MODE_MATRIX_SEED=<seed> MODE_MATRIX_KILLS=<kills per mode> swift test --filter ModeMatrix
import Foundation
import GRDB
import ManagedDocument
import SystemPackage
import Testing
import TestSupport

/// The table every mode writes: rows made by SQL alone, so that a model database replays the same steps.
private let matrixSchema = "CREATE TABLE t(id INTEGER PRIMARY KEY, n INTEGER NOT NULL, body TEXT NOT NULL)"

/// Inserts rows `first ... last` of `width` characters each, in one statement.
private func insertRows(_ first: Int, _ last: Int, width: Int = 300) -> String {
    "WITH RECURSIVE r(i) AS (SELECT \(first) UNION ALL SELECT i + 1 FROM r WHERE i < \(last)) "
        + "INSERT INTO t(id, n, body) SELECT i, i * 7, replace(hex(zeroblob(\(width / 2))), '0', char(65 + i % 26)) FROM r"
}

/// One row of the matrix: SQLite settings and what SQLite promises for them under a process kill.
struct MatrixMode: Sendable, CustomTestStringConvertible {
    enum Promise: Sendable {
        /// Every transaction reported committed survives, and one cut short is rolled back (a rollback journal).
        case everyCommit
        /// Nothing for a kill inside a transaction (no journal on disk to roll it back): killed between two.
        case betweenTransactions
    }

    var name: String
    /// Steps run first.
    var settings: [String] = []
    /// Steps run halfway through the workload (VACUUM, a page size change).
    var middle: [String] = []
    var promise = Promise.everyCommit
    /// A store of about 2.5 MiB (over 1 MiB) instead of about 40 KiB.
    var isLarge = false
    /// A save after every third commit.
    var saves = false
    /// Options given to `notes-app` (autosave).
    var options: [String] = []
    /// Every commit writes an attached database too, in the same transaction.
    var attaches = false

    var testDescription: String { name }

    static let all: [MatrixMode] = [
        MatrixMode(name: "journal_mode = DELETE (the default), store under 1 MiB"),
        MatrixMode(name: "journal_mode = DELETE, store over 1 MiB", isLarge: true),
        MatrixMode(name: "synchronous = OFF", settings: ["PRAGMA synchronous = OFF"]),
        MatrixMode(name: "synchronous = NORMAL", settings: ["PRAGMA synchronous = NORMAL"]),
        MatrixMode(name: "synchronous = FULL", settings: ["PRAGMA synchronous = FULL"]),
        MatrixMode(name: "synchronous = EXTRA", settings: ["PRAGMA synchronous = EXTRA"]),
        MatrixMode(name: "journal_mode = TRUNCATE", settings: ["PRAGMA journal_mode = TRUNCATE"]),
        MatrixMode(name: "journal_mode = PERSIST", settings: ["PRAGMA journal_mode = PERSIST"]),
        MatrixMode(name: "journal_mode = MEMORY", settings: ["PRAGMA journal_mode = MEMORY"],
                   promise: .betweenTransactions),
        MatrixMode(name: "journal_mode = OFF", settings: ["PRAGMA journal_mode = OFF"], promise: .betweenTransactions),
        MatrixMode(name: "locking_mode = EXCLUSIVE", settings: ["PRAGMA locking_mode = EXCLUSIVE"]),
        MatrixMode(name: "page_size = 8192 + VACUUM", middle: ["PRAGMA page_size = 8192", "VACUUM"]),
        MatrixMode(name: "page_size = 1024 + VACUUM, store over 1 MiB", middle: ["PRAGMA page_size = 1024", "VACUUM"],
                   isLarge: true),
        MatrixMode(name: "auto_vacuum = FULL", settings: ["PRAGMA auto_vacuum = FULL", "VACUUM"]),
        MatrixMode(name: "auto_vacuum = INCREMENTAL + incremental_vacuum",
                   settings: ["PRAGMA auto_vacuum = INCREMENTAL", "VACUUM"],
                   middle: ["PRAGMA incremental_vacuum(3)", "PRAGMA incremental_vacuum"]),
        MatrixMode(name: "temp_store = FILE", settings: ["PRAGMA temp_store = FILE"],
                   middle: ["CREATE TEMP TABLE scratch AS SELECT * FROM t",
                            "INSERT INTO t(id, n, body) SELECT id + 100000, n, body FROM scratch WHERE id % 4 = 0"]),
        MatrixMode(name: "cache_size = 2 (spilled mid-transaction)", settings: ["PRAGMA cache_size = 2"]),
        MatrixMode(name: "mmap_size = 1 MiB", settings: ["PRAGMA mmap_size = 1048576"]),
        MatrixMode(name: "ATTACH: both databases in each transaction", attaches: true),
        MatrixMode(name: "VACUUM INTO", middle: ["VACUUM INTO"]),
        MatrixMode(name: "saves between commits, store under 1 MiB", saves: true),
        MatrixMode(name: "saves between commits, store over 1 MiB", isLarge: true, saves: true),
        MatrixMode(name: "autosave between commits", options: ["--autosave", "0.02"]),
    ]

    /// The SQL that makes the saved document every kill starts from.
    var initial: [String] {
        [matrixSchema, isLarge ? insertRows(1, 1200, width: 2000) : insertRows(1, 100)]
    }

    /// The steps `notes-app sql` runs: the settings, twelve commits of several kinds (one row, many rows, updates,
    /// deletes) with the middle steps after the sixth, saves after every third when asked. `attached` names the
    /// attached database, `copy` the target of `VACUUM INTO`.
    func steps(attached: FilePath, copy: FilePath) -> [String] {
        var steps = settings
        if attaches {
            steps += ["ATTACH DATABASE '\(attached.string)' AS aux", "CREATE TABLE aux.tag(id INTEGER PRIMARY KEY, n INTEGER)"]
        }
        for index in 0..<12 {
            if index == 6 {
                steps += middle.map { $0 == "VACUUM INTO" ? "VACUUM INTO '\(copy.string)'" : $0 }
            }
            let base = 10_000 + index * 100
            var commit: String
            switch index % 4 {
            case 0: commit = "INSERT INTO t(id, n, body) VALUES (\(base), \(index), 'one row \(index)')"
            case 1: commit = insertRows(base, base + 40, width: 1000)  // more pages than cache_size = 2 holds
            case 2: commit = "UPDATE t SET n = n + \(index) WHERE id % 5 = \(index % 5)"
            default: commit = "DELETE FROM t WHERE id BETWEEN \(base - 200) AND \(base - 170)"
            }
            if attaches { commit = "BEGIN; \(commit); INSERT INTO aux.tag(n) VALUES (\(index)); COMMIT" }
            steps.append(commit)
            if saves, index % 3 == 2 { steps.append("save") }
        }
        return steps
    }
}

/// What a document holds after some steps: its store and, with ATTACH, the attached database's rows.
private struct Snapshot: Equatable, CustomStringConvertible {
    var content: StoreContent
    var attached: String?
    var description: String { "\(content)\(attached.map { " aux \($0)" } ?? "")" }
}

/// The attached database's rows, in a line.
private func tags(_ db: Database, schema: String) throws -> String {
    try String.fetchOne(db, sql: "SELECT count(*) || ':' || total(n) FROM \(schema).tag") ?? ""
}

/// The snapshots of a plain SQLite database replaying `initial` then `steps`: element `j` after the first `j` steps
/// (saves and queries leave it as it is).
private func models(_ mode: MatrixMode, initial: [String], steps: [String], in folder: FilePath) throws -> [Snapshot] {
    let queue = try DatabaseQueue(path: folder.appending("model.sqlite").string)
    defer { try? queue.close() }  // Squash: a scratch database.
    for step in initial { try queue.writeWithoutTransaction { db in try db.execute(sql: step) } }
    func snapshot(after count: Int) throws -> Snapshot {
        try queue.writeWithoutTransaction { db in
            let hasTags = mode.attaches && count >= 2 + mode.settings.count
            return Snapshot(content: try StoreContent(db), attached: hasTags ? try tags(db, schema: "aux") : nil)
        }
    }
    var snapshots = [try snapshot(after: 0)]
    for (index, step) in steps.enumerated() {
        if step != "save", !step.hasPrefix("?") {
            try queue.writeWithoutTransaction { db in try db.execute(sql: step) }
        }
        snapshots.append(try snapshot(after: index + 1))
    }
    return snapshots
}

/// The seed of every kill's moment: MODE_MATRIX_SEED, or a fixed one.
private let matrixSeed = UInt64(ProcessInfo.processInfo.environment["MODE_MATRIX_SEED"] ?? "") ?? 20_260_421
/// Kills per mode: MODE_MATRIX_KILLS, or 2.
private let killsPerMode = max(1, Int(ProcessInfo.processInfo.environment["MODE_MATRIX_KILLS"] ?? "") ?? 2)

/// Whether the attached database is read after the recovered document closed (the default: the close removes the
/// working copy, which must keep SQLite's super-journal), or before (MODE_MATRIX_AUX_BEFORE_CLOSE=1).
private let auxAfterClose = ProcessInfo.processInfo.environment["MODE_MATRIX_AUX_BEFORE_CLOSE"] != "1"

/// A name's FNV-1a hash: the same in every run, so that a mode's kills follow from the seed alone.
private func stableHash(_ name: String) -> UInt64 {
    name.utf8.reduce(0xcbf2_9ce4_8422_2325) { ($0 ^ UInt64($1)) &* 0x100_0000_01b3 }
}

@Suite("The mode matrix: every SQLite setting a writable document accepts, killed at random moments")
struct ModeMatrixTests {
    @Test("killed at random moments while committing: every reported commit, at most one more, whole", arguments: MatrixMode.all)
    func killed(_ mode: MatrixMode) async throws {
        try await withTemporaryDirectory { folder in
            let pristine = folder.appending("pristine.mdz")
            let document = try await Document.open(at: pristine, options: appOptions(folder))
            try await document.writer.writeWithoutTransaction { db in
                for step in mode.initial { try db.execute(sql: step) }
            }
            try await document.save()
            try await document.close()
            let modelFolder = folder.appending("model")
            try FileManager.default.createDirectory(atPath: modelFolder.string, withIntermediateDirectories: true)
            let expected = try models(mode, initial: mode.initial,
                                      steps: mode.steps(attached: modelFolder.appending("aux.sqlite"),
                                                        copy: modelFolder.appending("copy.sqlite")),
                                      in: modelFolder)
            var generator = SeededGenerator(seed: matrixSeed ^ stableHash(mode.name))
            for number in 0..<killsPerMode {
                try await killOnce(mode, number: number, pristine: pristine, expected: expected, folder: folder,
                                   generator: &generator)
            }
        }
    }

    /// Copies the pristine bundle, runs the steps on the copy, kills the app at a moment drawn from `generator`,
    /// and checks the bundle (read-only) and the recovered document.
    private func killOnce(_ mode: MatrixMode, number: Int, pristine: FilePath, expected: [Snapshot], folder: FilePath,
                          generator: inout SeededGenerator) async throws {
        let run = folder.appending("kill-\(number)")
        try FileManager.default.createDirectory(atPath: run.string, withIntermediateDirectories: true)
        let bundle = run.appending("Doc.mdz")
        try FileManager.default.copyItem(atPath: pristine.string, toPath: bundle.string)
        let attached = run.appending("aux.sqlite"), copy = run.appending("copy.sqlite")
        let steps = mode.steps(attached: attached, copy: copy)
        let killed = try killApp(mode, number: number, steps: steps, bundle: bundle, in: run, generator: &generator)
        let context2 = killed.context, acknowledged = killed.acknowledged
        let inFlight = min(acknowledged + 1, steps.count)
        if mode.promise == .betweenTransactions, acknowledged != killed.after {
            // > Killed later than the pause (a stalled test thread): inside a transaction, where SQLite promises
            // > nothing in this journal mode. Not an outcome to judge.
            print("mode-matrix: \(context2): killed outside the pause; not judged")
            return
        }

        // > A read-only open sees the bundle: the last save the app reported, or one in flight, or (autosave) any
        // > commit since.
        let savedSteps = [0] + steps.indices.filter { steps[$0] == "save" }.map { $0 + 1 }
        let lastSave = savedSteps.filter { $0 <= acknowledged }.max() ?? 0
        var allowedSaves = [lastSave]
        if mode.options.contains("--autosave") {
            allowedSaves = Array(lastSave...inFlight)
        } else if acknowledged < steps.count, steps[acknowledged] == "save" {
            allowedSaves.append(inFlight)
        }
        let onDisk = try await bundleContent(bundle, folder: run)
        #expect(allowedSaves.contains { expected[$0].content == onDisk },
                "\(context2): the bundle holds none of the saves after steps \(allowedSaves): \(onDisk.difference(from: expected[lastSave].content))")

        // > Recovered: every commit acknowledged, and the one in flight whole or not at all.
        let (snapshot, content, integrity) = try await recover(mode, bundle: bundle, attached: attached, in: run)
        _ = try BundleReader(at: bundle).verify(full: true, workingDirectory: run)
        #expect(integrity == "ok", "\(context2): \(integrity)")
        let matches = [acknowledged, inFlight].filter { expected[$0] == snapshot }
        #expect(!matches.isEmpty,
                "\(context2): recovered \(snapshot), expected after step \(acknowledged) \(expected[acknowledged]): \(content.difference(from: expected[acknowledged].content))")

        print("mode-matrix: \(context2): \(killed.isHot ? "hot journal; " : "")recovered as after step \(Set(matches).sorted().map(String.init).joined(separator: " or "))"
              + (onDisk == expected[lastSave].content ? "" : "; the bundle as after a later step (in flight or autosaved)"))

        if let index = steps.firstIndex(where: { $0.hasPrefix("VACUUM INTO") }), acknowledged > index {
            let queue = try DatabaseQueue(path: copy.string)
            let copied = try await queue.read { db in
                (try StoreContent(db), try String.fetchOne(db, sql: "PRAGMA integrity_check"))
            }
            try queue.close()
            #expect(copied.1 == "ok" && copied.0 == expected[index + 1].content, "\(context2): VACUUM INTO's copy")
        }
    }

    /// What a kill left: the step it was aimed after, the last step the app acknowledged, whether a journal was hot
    /// (the kill fell inside a transaction; diagnosis only), and the words that name it in a failure.
    private struct Kill {
        var after: Int
        var acknowledged: Int
        var isHot: Bool
        var context: String
    }

    /// Runs `steps` in the app on `bundle` and kills it at a moment drawn from `generator`.
    private func killApp(_ mode: MatrixMode, number: Int, steps: [String], bundle: FilePath, in run: FilePath,
                         generator: inout SeededGenerator) throws -> Kill {
        // > The moment: once the app says `step M` (M = 0: once it opened the document), after a delay of up to 15 ms
        // > (a step takes a few milliseconds: the kill falls inside the next one, or between, or a few later); with
        // > a pause after each step, at once.
        let isBetween = mode.promise == .betweenTransactions
        let after = isBetween ? 1 + Int(generator.next() % UInt64(steps.count)) : Int(generator.next() % UInt64(steps.count + 1))
        let delay = isBetween ? 0 : Int(generator.next() % 15_000)
        let context = "MODE_MATRIX_SEED=\(matrixSeed), \(mode.name), kill \(number): after step \(after) + \(delay) µs"
        let pause = isBetween ? ["--pause", "0.1"] : []
        let app = try NotesApp([bundle.string, "sql"] + steps + ["--hold", "120"] + pause + mode.options, in: run)
        let seen = app.waitFor(after == 0 ? "opened" : "step \(after)\n")
        if delay > 0 { usleep(useconds_t(delay)) }
        kill(app.process.processIdentifier, SIGKILL)
        let output = app.finish().output
        try #require(seen, "\(context): the app stopped first: \(output)")
        let acknowledged = output.split(separator: "\n").compactMap { line in
            line.hasPrefix("step ") ? Int(line.dropFirst(5)) : nil
        }.max() ?? 0
        // > A journal left with a header that is not zeros: the kill fell inside a transaction (diagnosis only).
        let journals = (FileManager.default.enumerator(atPath: childWorkingDirectory(run).string)?.allObjects as? [String] ?? [])
            .filter { $0.hasSuffix("/overlay-journal") }
        let isHot = try journals.contains { name in
            let bytes = try Data(contentsOf: URL(fileURLWithPath: childWorkingDirectory(run).appending(name).string))
            return bytes.prefix(28).contains { $0 != 0 }
        }
        return Kill(after: after, acknowledged: acknowledged, isHot: isHot,
                    context: "\(context); step \(acknowledged) acknowledged of \(steps.count)")
    }

    /// Opens the killed app's document with recovery, reads it and closes it saving: what it held (with the attached
    /// database's tags), its content, and its integrity check.
    private func recover(_ mode: MatrixMode, bundle: FilePath, attached: FilePath, in run: FilePath) async throws
        -> (Snapshot, StoreContent, String) {
        var options = appOptions(run)
        options.workingDirectory = childWorkingDirectory(run)
        options.recovery = .recover
        let document = try await Document.open(at: bundle, options: options)
        let (content, integrity) = try await document.reader.read { db in
            (try StoreContent(db), try String.fetchAll(db, sql: "PRAGMA integrity_check").joined(separator: "; "))
        }
        var snapshot = Snapshot(content: content)
        // > The attached database's hot journal names a super-journal in the working copy's folder, which SQLite
        // > needs to decide whether the transaction committed: the close keeps it (docs/RELIABILITY.md, "Mode
        // > matrix"), so the attached database is read after the close by default.
        func readAttached() async throws {
            guard mode.attaches, FileManager.default.fileExists(atPath: attached.string) else { return }
            let queue = try DatabaseQueue(path: attached.string)
            snapshot.attached = try await queue.read { db in try db.tableExists("tag") ? try tags(db, schema: "main") : nil }
            try queue.close()
        }
        if !auxAfterClose { try await readAttached() }
        try await document.close(savingChanges: true)
        if auxAfterClose { try await readAttached() }
        return (snapshot, content, integrity)
    }

    @Test("PRAGMA journal_mode = WAL is refused, named in the error, and nothing committed before or after is lost",
          arguments: [[], ["PRAGMA locking_mode = EXCLUSIVE"]])
    func walRefused(_ settings: [String]) async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Doc.mdz")
            let document = try await Document.open(at: bundle, options: appOptions(folder))
            let error = await #expect(throws: DatabaseError.self) {
                try await document.writer.writeWithoutTransaction { db in
                    for setting in settings { try db.execute(sql: setting) }
                    try db.execute(sql: matrixSchema)
                    try db.execute(sql: insertRows(1, 50))
                    try db.execute(sql: "PRAGMA journal_mode = WAL")
                }
            }
            #expect(error?.resultCode == .SQLITE_ERROR, "\(String(describing: error))")
            #expect(error?.message?.contains("rollback journal") == true, "\(String(describing: error))")
            #expect(error?.sql?.contains("journal_mode = WAL") == true, "\(String(describing: error))")
            let mode = try await document.writer.writeWithoutTransaction { db in
                try db.execute(sql: insertRows(51, 60))
                return try String.fetchOne(db, sql: "PRAGMA journal_mode")
            }
            #expect(mode == "delete" || mode == "persist", "journal_mode \(mode ?? "nil") after the refusal")
            let expected = try await document.reader.read { db in try StoreContent(db) }
            try await document.save()
            try await document.close()
            #expect(try await bundleContent(bundle, folder: folder) == expected)

            // > The app's view: the refused step ends the app (status 65, the step and the pragma named) without a
            // > close; recovery finds every commit it reported before it.
            let steps = settings + [insertRows(61, 70), "INSERT INTO t(id, n, body) VALUES (71, 1, 'x')", "PRAGMA journal_mode = WAL"]
            let result = try NotesApp.run([bundle.string, "sql"] + steps, in: folder)
            #expect(result.status == 65, "\(result.output)")
            #expect(result.output.contains("error: step \(steps.count): ") && result.output.contains("journal_mode = WAL")
                    && result.output.contains("rollback journal"), "\(result.output)")
            var options = appOptions(folder)
            options.workingDirectory = childWorkingDirectory(folder)
            options.recovery = .recover
            let recovered = try await Document.open(at: bundle, options: options)
            let (count, integrity) = try await recovered.reader.read { db in
                (try Int.fetchOne(db, sql: "SELECT count(*) FROM t"), try String.fetchOne(db, sql: "PRAGMA integrity_check"))
            }
            try await recovered.close(savingChanges: false)
            #expect(count == 71 && integrity == "ok", "\(String(describing: count)) rows, \(integrity ?? "")")
        }
    }
}
