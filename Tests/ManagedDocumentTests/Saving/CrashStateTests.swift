// Every state a power cut can leave on every write path (CrashRecorder's persistence model), checked: the document
// opens (recovering where asked), holds every commit acknowledged before the cut, and its bundle verifies or the
// previous one stands; a legacy source is never gone while its bundle is not durable. And every step of a save and a
// rebase failed in turn (ENOSPC, EIO, EMFILE): the document stays usable or says it is not, and a reopen recovers
// every commit.
//
// CI checks a sample of each path's states; `CRASH_STATES=all` (scripts/crash-states.sh) checks every one.
import Crypto
import Foundation
import GRDB
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument  // OpenOptions.servesStoreInPlaceForWriting: the extracted working store's path
import SystemPackage
import Testing
import TestSupport

/// The rows of table `t` as one digest (`nil` when there is no such table), and their count.
private func rows(_ db: Database) throws -> (count: Int, digest: String) {
    guard try db.tableExists("t") else { return (0, "none") }
    var hasher = SHA256()
    var count = 0
    let cursor = try Row.fetchCursor(db, sql: "SELECT * FROM t ORDER BY id")
    while let row = try cursor.next() {
        count += 1
        hasher.update(data: Array(row.description.utf8))
    }
    return (count, hasher.finalize().map { String(format: "%02x", $0) }.joined())
}

/// Inserts rows `first ... last` of about 1 KiB each, made from their ids.
private func insert(_ db: Database, _ first: Int, _ last: Int) throws {
    try db.execute(sql: """
        WITH RECURSIVE r(i) AS (SELECT \(first) UNION ALL SELECT i + 1 FROM r WHERE i < \(last))
        INSERT INTO t SELECT i, printf('%d %s', i, replace(hex(zeroblob(400)), '0', char(65 + i % 26, 97 + i % 7))) FROM r
        """)
}

/// The options of every open here: working copies under the state's own root.
private func options(_ root: FilePath, recovering: Bool = false, readOnly: Bool = false,
                     extracting: Bool = false) -> Document.OpenOptions {
    var options = Document.OpenOptions()
    options.servesStoreInPlaceForWriting = !extracting
    options.createIfMissing = true
    options.workingDirectory = root.appending("working")
    options.recovery = recovering ? .recover : .discard
    options.isReadOnly = readOnly
    return options
}

/// The bundle's rows, read-only, after a full verification; `nil` when it is missing.
private func bundleRows(_ bundle: FilePath, root: FilePath) async throws -> (count: Int, digest: String)? {
    guard FileManager.default.fileExists(atPath: bundle.string) else { return nil }
    _ = try BundleReader(at: bundle).verify(full: true, workingDirectory: root)
    let document = try await Document.open(at: bundle, options: options(root, readOnly: true))
    let found = try await document.reader.read { db in try rows(db) }
    try await document.close()
    return found
}

/// The rows a writable open with `.recover` finds (the working copy's unsaved commits included).
private func recoveredRows(_ bundle: FilePath, root: FilePath) async throws -> (count: Int, digest: String) {
    let document = try await Document.open(at: bundle, options: options(root, recovering: true))
    let found = try await document.reader.read { db in try rows(db) }
    try await document.close(savingChanges: false)
    return found
}

/// How many states each path checks: all with `CRASH_STATES=all`, a sample otherwise.
private let sampleSize = ProcessInfo.processInfo.environment["CRASH_STATES"] == "all" ? Int.max
    : Int(ProcessInfo.processInfo.environment["CRASH_STATES"] ?? "") ?? 40
/// How much each path does (commits, saves): `CRASH_SCALE` times the CI's.
private let scale = max(1, Int(ProcessInfo.processInfo.environment["CRASH_SCALE"] ?? "") ?? 1)
/// How many single changes a state leaves out at each point: `CRASH_DROPS` (`all`: every one), 12 otherwise.
private let drops = ProcessInfo.processInfo.environment["CRASH_DROPS"] == "all" ? Int.max
    : Int(ProcessInfo.processInfo.environment["CRASH_DROPS"] ?? "") ?? 12


/// Records `run` under `root`, then materializes each state (a sample of them; with `onlyAtMarks`, only those taken
/// at a mark or at the end) and checks it; returns the violations. Prints the counts, and the states by kind.
private func explore(_ path: String, root: FilePath, onlyAtMarks: Bool = false, sample: Int = sampleSize,
                     dropping: (@Sendable (FileIO.Event, FileIO.Event?) -> Bool)? = nil,
                     run: (CrashRecorder) async throws -> Void,
                     check: (CrashState) async throws -> String?) async throws -> [String] {
    let recorder = try CrashRecorder(root: root, dropping: dropping)
    try await FileIO.observe(recorder) { try await run(recorder) }
    if ProcessInfo.processInfo.environment["CRASH_STATES_TRACE"] != nil {
        for (index, operation) in recorder.recorded.enumerated() { print("  \(index): \(operation)") }
    }
    // > Counted first, then built again and every `stride`th checked as it comes: a state holds every file's bytes,
    // > so they are never all held at once.
    // > Every state taken at an acknowledgement is checked (there are few: what was acknowledged must be durable
    // > there); of the others, taken at flushes, every `stride`th.
    var total = 0, atMarks = 0
    await recorder.forEachState(maximumDrops: drops) { state in
        if state.isAtMark { atMarks += 1 } else if !onlyAtMarks { total += 1 }
    }
    let stride = max(1, total / max(1, sample - atMarks))
    total += atMarks
    var violations: [String] = []
    var checked = 0
    var position = 0
    var kinds: [CrashState.Kind: Int] = [:]
    try await recorder.forEachState(maximumDrops: drops) { state in
        guard !onlyAtMarks || state.isAtMark else { return }
        if !state.isAtMark {
            defer { position += 1 }
            guard position % stride == 0 else { return }
        }
        try state.materialize(at: root)
        checked += 1
        kinds[state.kind, default: 0] += 1
        do {
            if let violation = try await check(state) { violations.append("\(state.description): \(violation)") }
        } catch {
            violations.append("\(state.description): \(error)")
        }
    }
    print("crash-states: \(path): \(checked) of \(total) states checked, \(violations.count) violations, \(recorder.recorded.count) operations recorded")
    print("crash-kinds: \(path): " + CrashState.Kind.allCases.map { "\($0.rawValue)=\(kinds[$0, default: 0])" }.joined(separator: ", "))
    return violations
}

@Suite("Crash states and injected faults on every write path", .serialized, .serialChain)
struct CrashStateTests {
    /// A saved document of `rows` rows at `root/Doc.mdz` (about 0.9 KiB a row).
    private func makeDocument(_ root: FilePath, rows: Int) async throws -> FilePath {
        let bundle = root.appending("Doc.mdz")
        try await Document.withDocument(at: bundle, options: options(root)) { document in
            try await document.writer.write { db in
                try db.execute(sql: "CREATE TABLE t(id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
                try insert(db, 1, rows)
            }
        }
        return bundle
    }

    @Test("a save, incremental and full, and the rebase after it: every state recovers every commit, the bundle is whole, old or new",
          arguments: [true, false])
    func save(incremental: Bool) async throws {
        try await withTemporaryDirectory { root in
            let bundle = try await makeDocument(root, rows: 3000)
            var open = options(root)
            open.savesIncrementally = incremental
            let document = try await Document.open(at: bundle, options: open)
            // > Each cycle: a commit (marked), then a save (marked); the last cycle's commit is made before recording.
            var versions = [try await document.reader.read { db in try rows(db) }]
            func commit(_ cycle: Int) async throws {
                try await document.writer.write { db in
                    try db.execute(sql: "UPDATE t SET body = 'changed \(cycle)' WHERE id % \(500 - cycle) = 0")
                    try insert(db, 5001 + cycle * 10, 5010 + cycle * 10)
                }
                versions.append(try await document.reader.read { db in try rows(db) })
            }
            try await commit(0)
            let violations = try await explore(incremental ? "save (incremental) + rebase" : "save (full) + rebase",
                                               root: root) { recorder in
                for cycle in 0..<scale {
                    if cycle > 0 {
                        try await commit(cycle)
                        recorder.mark("commit")
                    }
                    try await document.save()
                    recorder.mark("saved")
                    #expect(document.lastSave?.mode == (incremental ? .incremental : .full), "\(String(describing: document.lastSave))")
                }
            } check: { state in
                // > Versions: 0 the bundle at first, n after commit n - 1; a save makes the latest one the bundle's.
                let committed = 1 + state.marks.filter { $0 == "commit" }.count
                let lastSave = state.marks.lastIndex(of: "saved")
                let savedVersion = lastSave.map { 1 + state.marks[..<$0].filter { $0 == "commit" }.count } ?? 0
                let recovered = try await recoveredRows(bundle, root: root)
                guard let version = versions.firstIndex(where: { $0 == recovered }), version >= committed else {
                    return "the recovered document lost commits (\(committed) acknowledged)"
                }
                guard let saved = try await bundleRows(bundle, root: root) else { return "the bundle is gone" }
                guard let bundled = versions.firstIndex(where: { $0 == saved }), bundled == savedVersion || bundled == committed else {
                    return "the bundle holds \(saved.count) rows, no version between the last save and the last commit"
                }
                return nil
            }
            try await document.close(savingChanges: false)
            #expect(violations.isEmpty, "\(violations.prefix(5))")
        }
    }

    /// The journal modes an app may set on a writable document, by working store: the overlay stays in a rollback
    /// mode (WAL is refused); an extracted store takes every mode.
    /// `CRASH_JOURNAL_MODES` (`overlay:DELETE,extracted:WAL`, as scripts/crash-mutants.sh sets it) keeps the ones
    /// named; CI (no `CRASH_STATES`) checks each mode through one route at least and `DELETE` through both, and
    /// scripts/crash-states.sh every mode through both.
    static let journalModes: [(extracting: Bool, mode: String)] = {
        let all = ["DELETE", "TRUNCATE", "PERSIST", "MEMORY", "OFF"].map { (false, $0) }
            + ["DELETE", "TRUNCATE", "PERSIST", "WAL", "MEMORY", "OFF"].map { (true, $0) }
        let environment = ProcessInfo.processInfo.environment
        let wanted = environment["CRASH_JOURNAL_MODES"]?.split(separator: ",").map(String.init)
            ?? (environment["CRASH_STATES"] == nil
                ? ["overlay:DELETE", "overlay:TRUNCATE", "overlay:MEMORY", "extracted:DELETE", "extracted:PERSIST",
                   "extracted:WAL", "extracted:OFF"] : nil)
        guard let wanted else { return all }
        return all.filter { wanted.contains(($0.0 ? "extracted:" : "overlay:") + $0.1) }
    }()

    @Test("commits through the overlay and through an extracted store, in each journal mode: every state holds every acknowledged commit",
          arguments: journalModes)
    func commits(extracting: Bool, mode: String) async throws {
        try await withTemporaryDirectory { root in
            let bundle = try await makeDocument(root, rows: 1500)
            let document = try await Document.open(at: bundle, options: options(root, extracting: extracting))
            let set = try await document.writer.writeWithoutTransaction { db in
                try String.fetchOne(db, sql: "PRAGMA journal_mode = \(mode)")
            }
            #expect(set?.uppercased() == mode)
            let base = try await document.reader.read { db in try rows(db) }
            var expected: [(count: Int, digest: String)] = [base]
            // > MEMORY and OFF keep no journal on disk: SQLite cannot undo a commit cut short, so only the states
            // > taken between commits are the promise there (every acknowledged one held).
            let withoutJournal = mode == "MEMORY" || mode == "OFF"
            // > CI samples DELETE, the default, as every other path (40 states), and the other modes more thinly.
            let sample = ProcessInfo.processInfo.environment["CRASH_STATES"] == nil && mode != "DELETE" ? 12 : sampleSize
            let violations = try await explore("commits (\(extracting ? "extracted" : "overlay"), \(mode))", root: root,
                                               onlyAtMarks: withoutJournal, sample: sample) { recorder in
                for round in 1...(3 * scale) {
                    try await document.writer.write { db in
                        try db.execute(sql: "UPDATE t SET body = 'round \(round)' WHERE id % \(97 + round) = 0")
                        try insert(db, 2000 + round * 100, 2000 + round * 100 + 60)
                        try db.execute(sql: "DELETE FROM t WHERE id BETWEEN \(round * 10) AND \(round * 10 + 5)")
                    }
                    expected.append(try await document.reader.read { db in try rows(db) })
                    recorder.mark("commit \(round)")
                }
            } check: { state in
                let found = try await recoveredRows(bundle, root: root)
                let acknowledged = state.marks.count
                guard let index = expected.firstIndex(where: { $0 == found }) else {
                    return "the recovered rows (\(found.count)) are no commit's"
                }
                return index >= acknowledged ? nil : "recovered commit \(index), but \(acknowledged) were acknowledged"
            }
            try await document.close(savingChanges: false)
            #expect(violations.isEmpty, "\(violations.prefix(5))")
        }
    }

    @Test("the checker can fail: with the folder flush after the journal's unlink left out of the record, it finds the lost commit")
    func checkerCatchesALostJournalUnlink() async throws {
        try await withTemporaryDirectory { root in
            let bundle = try await makeDocument(root, rows: 600)
            let document = try await Document.open(at: bundle, options: options(root))
            var expected = [try await document.reader.read { db in try rows(db) }]
            // > The record as it would be if WorkingFilesVFS's xDelete did not flush the folder (the X1 state of
            // > docs/RELIABILITY.md): a power cut may then bring the hot journal back.
            // > The states at the acknowledgements are where the unflushed unlink shows: each is checked.
            let violations = try await explore("checker check (journal unlink not flushed)", root: root,
                                               onlyAtMarks: true, sample: .max,
                                               dropping: { event, previous in
                event.kind == .syncDirectory && previous?.kind == .unlink
                    && previous?.path.lastComponent?.string.hasSuffix("-journal") == true
            }) { recorder in
                for round in 1...3 {
                    try await document.writer.write { db in
                        try db.execute(sql: "UPDATE t SET body = 'round \(round)' WHERE id % \(7 + round) = 0")
                        try insert(db, 1000 + round * 10, 1000 + round * 10 + 5)
                    }
                    expected.append(try await document.reader.read { db in try rows(db) })
                    recorder.mark("commit \(round)")
                }
            } check: { state in
                let found = try await recoveredRows(bundle, root: root)
                guard let index = expected.firstIndex(where: { $0 == found }) else { return "no commit's rows" }
                return index >= state.marks.count ? nil : "recovered commit \(index), but \(state.marks.count) were acknowledged"
            }
            try await document.close(savingChanges: false)
            #expect(violations.contains { $0.contains("were acknowledged") },
                    "the checker missed a lost journal unlink: \(violations.prefix(3))")
        }
    }

    @Test("the open that makes a working copy, then a first commit: every state after the commit holds it (the working copy's folder is durable)")
    func openAndCommit() async throws {
        try await withTemporaryDirectory { root in
            let bundle = try await makeDocument(root, rows: 800)
            // > No working copy yet, nor the working copies' folder: the open makes both.
            try FileManager.default.removeItem(atPath: root.appending("working").string)
            var committed: (count: Int, digest: String)?
            let before = try #require(try await bundleRows(bundle, root: root))
            try FileManager.default.removeItem(atPath: root.appending("working").string)
            var document: Document?
            let violations = try await explore("open + first commit", root: root) { recorder in
                let opened = try await Document.open(at: bundle, options: options(root))
                document = opened
                recorder.mark("opened")
                try await opened.writer.write { db in try insert(db, 4001, 4030) }
                committed = try await opened.reader.read { db in try rows(db) }
                recorder.mark("committed")
            } check: { state in
                let found = try await recoveredRows(bundle, root: root)
                if state.marks.contains("committed") { return found == committed! ? nil : "the acknowledged commit is lost" }
                return found == before || found == committed! ? nil : "the recovered rows are no commit's"
            }
            try await document?.close(savingChanges: false)
            #expect(violations.isEmpty, "\(violations.prefix(5))")
        }
    }

    @Test("recovery itself, then the close that saves it: every state still holds the unsaved commit")
    func recovery() async throws {
        try await withTemporaryDirectory { root in
            let bundle = try await makeDocument(root, rows: 1200)
            let before = try await recoveredRows(bundle, root: root)
            // > A process that commits and dies: its working copy holds the commit, the bundle does not.
            let document = try await Document.open(at: bundle, options: options(root))
            try await document.writer.write { db in try insert(db, 9001, 9040) }
            let after = try await document.reader.read { db in try rows(db) }
            let crashed = root.appending("crashed")
            try FileManager.default.copyItem(atPath: root.appending("working").string, toPath: crashed.string)
            try await document.close(savingChanges: false)
            try FileManager.default.removeItem(atPath: root.appending("working").string)
            try FileManager.default.moveItem(atPath: crashed.string, toPath: root.appending("working").string)

            let violations = try await explore("recovery + close", root: root) { recorder in
                let recovered = try await Document.open(at: bundle, options: options(root, recovering: true))
                recorder.mark("recovered")
                try await recovered.close(savingChanges: true)
                recorder.mark("closed")
            } check: { state in
                guard let saved = try await bundleRows(bundle, root: root) else { return "the bundle is gone" }
                if state.marks.contains("closed") {
                    return saved == after ? nil : "the close's save is not in the bundle"
                }
                if saved == after { return nil }
                guard saved == before else { return "the bundle is neither save" }
                return try await recoveredRows(bundle, root: root) == after ? nil : "the unsaved commit is lost"
            }
            #expect(violations.isEmpty, "\(violations.prefix(5))")
        }
    }

    @Test("a migration's save: every state holds the bundle before or after it, whole", arguments: [false, true])
    func migrate(large: Bool) async throws {
        try await withTemporaryDirectory { root in
            let bundle = try await makeDocument(root, rows: large ? 3000 : 100)
            let migrations = root.appending("migrations")
            try FileManager.default.createDirectory(atPath: migrations.string, withIntermediateDirectories: true)
            try "UPDATE t SET body = 'migrated' WHERE id % 7 = 0; CREATE TABLE tag(name TEXT);\n"
                .write(toFile: migrations.appending("V1__tags.sql").string, atomically: true, encoding: .utf8)
            let before = try #require(try await bundleRows(bundle, root: root))
            let violations = try await explore(large ? "migrate (large)" : "migrate (small)", root: root) { recorder in
                let applied = try await SQLMigrationFolder(directory: migrations).apply(to: bundle)
                #expect(applied == ["V1__tags"])
                recorder.mark("migrated")
            } check: { state in
                guard let saved = try await bundleRows(bundle, root: root) else { return "the bundle is gone" }
                let migrated = saved != before
                if state.marks.contains("migrated") && !migrated { return "the acknowledged migration is not in the bundle" }
                if migrated {
                    let tables = try await Document.withDocument(at: bundle, options: options(root, readOnly: true)) { document in
                        try await document.reader.read { db in try db.tableExists("tag") }
                    }
                    if !tables { return "a bundle with migrated rows but no migrated schema" }
                }
                return nil
            }
            #expect(violations.isEmpty, "\(violations.prefix(5))")
        }
    }

    @Test("a conversion of a store (a -wal, a hot -journal, none), kept, backed up or deleted: the source never goes before its bundle is durable",
          arguments: [("minimalTime", ["", "-wal", "-shm"]), ("Ledger", ["", "-journal"]), ("TasteB", [""])],
          [LegacyPolicy.keep, .backup, .delete])
    func convert(store: (name: String, suffixes: [String]), policy: LegacyPolicy) async throws {
        try await withTemporaryDirectory { root in
            let source = root.appending("stores").appending("\(store.name).sqlite")
            try FileManager.default.createDirectory(atPath: source.removingLastComponent().string, withIntermediateDirectories: true)
            let samples = FilePath(#filePath).removingLastComponent().removingLastComponent().removingLastComponent()
                .removingLastComponent().appending("Samples/stores")
            for suffix in store.suffixes {
                try FileManager.default.copyItem(atPath: samples.appending("\(store.name).sqlite\(suffix)").string,
                                                 toPath: source.string + suffix)
            }
            let expected = try storeRows(source, root: root)
            let bundle = root.appending("stores").appending("\(store.name).mdz")
            var conversion = ConversionOptions()
            conversion.legacyPolicy = policy
            let violations = try await explore("convert (\(store.name), \(policy))", root: root) { recorder in
                _ = try LegacyConverter(options: conversion).convert(storeAt: source)
                recorder.mark("converted")
            } check: { state in
                try conversionViolation(source: source, bundle: bundle, expected: expected, root: root,
                                        acknowledged: state.marks.contains("converted"))
            }
            #expect(violations.isEmpty, "\(violations.prefix(5))")
        }
    }

    @Test("a batch of stores with a -wal and a hot -journal, three at once, deleted once converted: no source goes before its bundle is durable")
    func batch() async throws {
        try await withTemporaryDirectory { root in
            let samples = FilePath(#filePath).removingLastComponent().removingLastComponent().removingLastComponent()
                .removingLastComponent().appending("Samples/stores")
            let tree = root.appending("tree")
            var stores: [(source: FilePath, bundle: FilePath, expected: String)] = []
            for (folder, name, suffixes) in [("a", "minimalTime", ["", "-wal", "-shm"]), ("b", "Ledger", ["", "-journal"]),
                                             ("c", "TasteB", [""])] {
                let source = tree.appending(folder).appending("\(name).sqlite")
                try FileManager.default.createDirectory(atPath: source.removingLastComponent().string,
                                                        withIntermediateDirectories: true)
                for suffix in suffixes {
                    try FileManager.default.copyItem(atPath: samples.appending("\(name).sqlite\(suffix)").string,
                                                     toPath: source.string + suffix)
                }
                stores.append((source, source.removingLastComponent().appending("\(name).mdz"),
                               try storeRows(source, root: root)))
            }
            var options = BatchOptions()
            // > Three workers: their folder flushes are group commits (FolderFlushes) under way at once.
            options.jobs = 3
            options.conversion.legacyPolicy = .delete
            let violations = try await explore("batch (3 stores, 3 jobs)", root: root) { recorder in
                let summary = try await BatchConverter(root: tree, options: options).run { _ in }
                #expect(!summary.hasProblems && summary.count(.converted) == 3, "\(summary)")
                recorder.mark("done")
            } check: { state in
                for store in stores {
                    if let violation = try conversionViolation(source: store.source, bundle: store.bundle,
                                                               expected: store.expected, root: root,
                                                               acknowledged: state.marks.contains("done")) {
                        return "\(store.source.lastComponent!): \(violation)"
                    }
                }
                return nil
            }
            #expect(violations.isEmpty, "\(violations.prefix(5))")
        }
    }

    /// What is wrong with a state of a conversion of `source` into `bundle`: the source gone while the bundle is not
    /// whole (every row of `expected`), the source changed, or an acknowledged bundle not whole; `nil` when right.
    private func conversionViolation(source: FilePath, bundle: FilePath, expected: String, root: FilePath,
                                     acknowledged: Bool) throws -> String? {
        let sourceThere = FileManager.default.fileExists(atPath: source.string)
        var bundleGood = false
        var why = "it is missing"
        if FileManager.default.fileExists(atPath: bundle.string) {
            do {
                _ = try BundleReader(at: bundle).verify(full: true, workingDirectory: root)
                let extracted = root.appending("check.sqlite")
                _ = try BundleReader(at: bundle).extractStore(to: extracted)
                defer { try? FileManager.default.removeItem(atPath: extracted.string) }
                bundleGood = try storeRows(extracted, root: root) == expected
                why = "its rows differ"
            } catch {
                why = "\(error)"
            }
        }
        if acknowledged && !bundleGood { return "the acknowledged bundle is not whole: \(why)" }
        if !sourceThere && !bundleGood { return "the source is gone and the bundle is not whole: \(why)" }
        if sourceThere && !bundleGood, try storeRows(source, root: root) != expected {
            return "the source no longer holds its rows"
        }
        return nil
    }

    /// The rows of every table of a loose store (a copy of it and its sidecars, opened by SQLite, which applies a
    /// -wal and rolls back a hot journal), as one digest.
    private func storeRows(_ store: FilePath, root: FilePath) throws -> String {
        let scratch = root.appending(".scratch-\(UUID().uuidString)")
        try FileManager.default.createDirectory(atPath: scratch.string, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: scratch.string) }
        let copy = scratch.appending(store.lastComponent!.string)
        for suffix in ["", "-wal", "-journal"] where FileManager.default.fileExists(atPath: store.string + suffix) {
            try FileManager.default.copyItem(atPath: store.string + suffix, toPath: copy.string + suffix)
        }
        let queue = try DatabaseQueue(path: copy.string)
        defer { try? queue.close() }
        return try queue.read { db in
            var hasher = SHA256()
            for table in try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name") {
                let cursor = try Row.fetchCursor(db, sql: "SELECT * FROM \(table.quotedDatabaseIdentifier) ORDER BY rowid")
                while let row = try cursor.next() { hasher.update(data: Array("\(table):\(row)".utf8)) }
            }
            return hasher.finalize().map { String(format: "%02x", $0) }.joined()
        }
    }
}

/// Fails the `failing`th change the library makes under `root` with `error`, as the system would; counts them all.
private final class FaultInjector: FileIO.Observer, @unchecked Sendable {  // every field is guarded by `lock`
    let root: FilePath
    let failing: Int
    let error: Errno
    private let lock = NSLock()
    private var seen = 0
    private(set) var failed: FileIO.Event.Kind?

    init(root: FilePath, failing: Int, error: Errno) {
        self.root = root
        self.failing = failing
        self.error = error
    }

    var count: Int { lock.withLock { seen } }
    var injected: FileIO.Event.Kind? { lock.withLock { failed } }

    func willPerform(_ event: FileIO.Event) throws {
        guard event.path.starts(with: root) || event.destination?.starts(with: root) == true else { return }
        try lock.withLock {
            seen += 1
            if seen == failing {
                failed = event.kind
                throw error
            }
        }
    }

    func didPerform(_ event: FileIO.Event) {}
}

extension CrashStateTests {
    @Test("every step of a save and its rebase failed in turn with ENOSPC, EIO and EMFILE: the document stays usable or says it is not, and a reopen recovers every commit",
          arguments: [true, false])
    func faults(large: Bool) async throws {
        try await withTemporaryDirectory { folder in
            let template = folder.appending("template")
            try FileManager.default.createDirectory(atPath: template.string, withIntermediateDirectories: true)
            _ = try await makeDocument(template, rows: large ? 1500 : 200)
            // > A save without faults, counted: every one of its changes is failed in turn below.
            let steps = try await faultCase(folder.appending("count"), template: template, failing: Int.max, error: .ioError).steps
            #expect(steps > 10, "a save makes \(steps) changes")
            var outcomes: [String: Int] = [:]
            // > CI fails each step with one of the three errors in turn; FAULTS=all (scripts/crash-states.sh) with each.
            let errors = [Errno.noSpace, .ioError, .tooManyOpenFiles]
            let every = ProcessInfo.processInfo.environment["FAULTS"] == "all"
            for step in 1...steps {
                for error in every ? errors : [errors[step % errors.count]] {
                    let outcome = try await faultCase(folder.appending("case-\(step)-\(error.rawValue)"), template: template,
                                                      failing: step, error: error)
                    outcomes[outcome.summary, default: 0] += 1
                }
            }
            print("faults (\(large ? "large" : "small")): \(steps) steps × \(every ? 3 : 1) errors: \(outcomes.sorted { $0.key < $1.key })")
        }
    }

    /// Copies the template, opens it, commits, saves with the `failing`th change failed, then goes on as an app would
    /// (another commit and save, a close) and reopens: every acknowledged commit must be there.
    private func faultCase(_ root: FilePath, template: FilePath, failing: Int, error: Errno) async throws
        -> (steps: Int, summary: String) {
        try FileManager.default.copyItem(atPath: template.string, toPath: root.string)
        defer { try? FileManager.default.removeItem(atPath: root.string) }  // Squash cleanup error of a scratch folder.
        let bundle = root.appending("Doc.mdz")
        let document = try await Document.open(at: bundle, options: options(root))
        try await document.writer.write { db in try insert(db, 7001, 7020) }
        let first = try await document.reader.read { db in try rows(db) }
        let injector = FaultInjector(root: root, failing: failing, error: error)
        var saveError: DocumentError?
        await FileIO.observe(injector) {
            do { try await document.save() } catch { saveError = error as? DocumentError }
        }
        let context = "step \(failing) (\(injector.injected.map { "\($0)" } ?? "none")) failed with \(error)"
        if saveError == nil && failing != Int.max, let injected = injector.injected {
            // > A failure after the rename (the rebase, a retired file) leaves a saved document.
            let saved = try await bundleRows(bundle, root: root)
            #expect(saved.map { $0 == first } == true, "\(context): the save succeeded, the bundle differs (\(injected))")
        }
        // > The app goes on: another commit, another save; each works or says why not.
        var acknowledged = first
        do {
            try await document.writer.write { db in try insert(db, 8001, 8005) }
            acknowledged = try await document.reader.read { db in try rows(db) }
            try await document.save()
        } catch {
            Issue.record("\(context): the document is not usable after the failed save (\(error))")
        }
        try? await document.close(savingChanges: false)  // Squash: the reopen checks what counts
        let recovered = try await recoveredRows(bundle, root: root)
        #expect(recovered == acknowledged, "\(context): the reopen has \(recovered.count) rows, \(acknowledged.count) were committed (save said: \(saveError.map { "\($0)" } ?? "saved"))")
        _ = try BundleReader(at: bundle).verify(full: true, workingDirectory: root)
        return (injector.count, saveError == nil ? "saved" : "failed: \(saveError!.code)")
    }
}
