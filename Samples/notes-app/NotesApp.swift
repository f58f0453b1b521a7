import ArgumentParser
import Foundation
import GRDB
import ManagedDocument
import SystemPackage

/// A small app that keeps its notes in a managed document: open (or create, or convert), add, save, close.
///
/// ```
/// notes-app Notes.mdz add "Buy bread" "Call Ada"
/// notes-app Notes.mdz list
/// notes-app Notes.mdz rewrite v2 --bulk 4000       # every note replaced: a save is all old or all new
/// notes-app Notes.mdz add --bulk 10000 --hold 5      # keeps the document open (and locked) for 5 s
/// notes-app Notes.mdz journal --rows 500 --autosave 0.05 --save-every 50
///                                                    # appends entries, autosaved as they come
/// notes-app Notes.mdz journal --rows 200 --save-every 10 --echo
///                                                    # says "committed N" after each entry's commit
/// notes-app Notes.mdz sql "PRAGMA synchronous = OFF" "INSERT INTO note(text) VALUES ('x')" save "?SELECT count(*) FROM note" --hold 60
///                                                    # runs each step in turn (SQL outside a transaction, save,
///                                                    # revert, ?query printed), says "step N" after each, then
///                                                    # "ready", and keeps the document open for --hold seconds
/// ```
@main
struct NotesApp: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "notes-app",
        abstract: "A sample app whose notes live in a managed document.")

    @Argument(help: "The document.") var document: String
    @Argument(help: "add, rewrite (replace every note with --bulk notes tagged NOTE), journal (append --rows entries, autosaved), sql (run each step) or list")
    var action: String
    @Argument(help: "Notes to add.") var notes: [String] = []
    @Option(help: "Add this many generated notes with 1 KiB payloads.") var bulk = 0
    @Option(help: "Seconds to keep the document open before saving.") var hold = 0.0
    @Option(help: "Seconds to wait for another writer.") var wait = 0.0
    @Flag(help: "Open read-only.") var readOnly = false
    @Option(help: "journal: entries to append, one transaction each.") var rows = 100
    @Option(help: "journal: autosave after this many seconds of quiet (0: no autosave).") var autosave = 0.0
    @Option(help: "journal: also save explicitly after every this many entries (0: never).") var saveEvery = 0
    @Flag(help: "journal: say each entry once its transaction committed.") var echo = false
    @Flag(help: "Recover the unsaved changes a process that died left (RecoveryPolicy.recover).") var recover = false
    @Option(help: "sql: seconds to wait after saying each step (a kill then falls between two transactions).")
    var pause = 0.0
    @Option(help: "ReadingLimits.maxRestartSegmentSize, in bytes (0: the default).") var maxRestartSegmentSize: UInt64 = 0
    @Option(help: "WritingOptions.compressionThreads of saves (the default when not given).") var compressionThreads: Int?

    /// Opens the document with the options given; a refused open prints `error: …` and exits with 75 when another
    /// process holds it, 65 otherwise.
    func openDocument() async throws -> Document {
        var options = Document.OpenOptions()
        options.createIfMissing = true
        options.lockTimeout = wait
        options.isReadOnly = readOnly
        if autosave > 0 { options.autosaveInterval = autosave }
        if recover { options.recovery = .recover }
        if maxRestartSegmentSize > 0 { options.limits.maxRestartSegmentSize = maxRestartSegmentSize }
        if let compressionThreads { options.saving.compressionThreads = compressionThreads }
        do {
            return try await Document.open(at: FilePath(self.document), options: options)
        } catch let error as DocumentError {
            FileHandle.standardError.write(Data("error: \(error)\n".utf8))
            throw ExitCode(error.code == .inUse ? 75 : 65)
        }
    }

    func run() async throws {
        let document = try await openDocument()
        say("opened \(self.document)")
        switch action {
        case "add":
            let notes = self.notes
            let bulk = self.bulk
            try await document.writer.write { db in
                try db.execute(sql: "CREATE TABLE IF NOT EXISTS note(id INTEGER PRIMARY KEY, text TEXT NOT NULL, payload BLOB)")
                for note in notes { try db.execute(sql: "INSERT INTO note(text) VALUES (?)", arguments: [note]) }
                for index in 0..<bulk {
                    let payload = Data((0..<1024).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ index) })
                    try db.execute(sql: "INSERT INTO note(text, payload) VALUES (?, ?)", arguments: ["note \(index)", payload])
                }
            }
            say("written")
            if hold > 0 { try await Task.sleep(nanoseconds: UInt64(hold * 1e9)) }
            try await document.close(savingChanges: true)
            say("saved")
        case "rewrite":
            // Replaces every note with --bulk notes tagged with the first argument: a save is then all old or all new.
            let tag = notes.first ?? "rewrite"
            let bulk = self.bulk
            try await document.writer.write { db in
                try db.execute(sql: "CREATE TABLE IF NOT EXISTS note(id INTEGER PRIMARY KEY, text TEXT NOT NULL, payload BLOB)")
                try db.execute(sql: "DELETE FROM note")
                for index in 0..<bulk {
                    let payload = Data((0..<1024).map { UInt8(truncatingIfNeeded: $0 &* 17 &+ index &+ tag.count) })
                    try db.execute(sql: "INSERT INTO note(text, payload) VALUES (?, ?)", arguments: ["\(tag)#\(index)", payload])
                }
            }
            say("written")
            try await document.close(savingChanges: true)
            say("saved")
        case "journal":
            // Entry n holds "entry n" and a payload made from n, so a reader can check any prefix of them.
            let first = try await document.writer.write { db -> Int in
                try db.execute(sql: "CREATE TABLE IF NOT EXISTS entry(id INTEGER PRIMARY KEY, text TEXT NOT NULL, payload BLOB)")
                return (try Int.fetchOne(db, sql: "SELECT max(id) FROM entry") ?? 0) + 1
            }
            for id in first..<(first + rows) {
                try await document.writer.write { db in
                    try db.execute(sql: "INSERT INTO entry(id, text, payload) VALUES (?, ?, ?)",
                                   arguments: [id, "entry \(id)", NotesApp.journalPayload(id)])
                }
                if echo { say("committed \(id)") }
                if saveEvery > 0, id % saveEvery == 0 {
                    try await document.save()
                    say("saved \(id) \(document.lastSave.map { "\($0)" } ?? "")")
                }
                try await Task.sleep(nanoseconds: 2_000_000)
            }
            try await document.close(savingChanges: true)
            say("closed \(first + rows - 1)")
        case "sql":
            try await runSteps(notes, on: document)
        case "list":
            let texts = try await document.reader.read { db in
                try db.tableExists("note") ? try String.fetchAll(db, sql: "SELECT text FROM note ORDER BY id") : []
            }
            for text in texts { say(text) }
            if hold > 0 { try await Task.sleep(nanoseconds: UInt64(hold * 1e9)) }
            try await document.close(savingChanges: false)
        default:
            throw ValidationError("the action is add, rewrite, journal, sql or list")
        }
    }

    /// Runs each step in turn: `save`, `revert`, `?SQL` (a query whose rows are printed, one line each, values
    /// separated by `|`), or SQL run outside a transaction (a pragma, statements each in its own transaction, or
    /// `BEGIN … COMMIT`); says `step N` after each (then waits `--pause` seconds), then `ready`, then holds the
    /// document open for `--hold` seconds and closes it without saving. A failed step prints `error: …` and exits with 65.
    func runSteps(_ steps: [String], on document: Document) async throws {
        for (index, step) in steps.enumerated() {
            do {
                switch step {
                case "save": try await document.save()
                case "revert": try await document.revert()
                case let query where query.hasPrefix("?"):
                    let rows = try await document.reader.read { db in
                        try Row.fetchAll(db, sql: String(query.dropFirst())).map { row in
                            row.databaseValues.map { "\($0)" }.joined(separator: "|")
                        }
                    }
                    for row in rows { say(row) }
                default:
                    try await document.writer.writeWithoutTransaction { db in try db.execute(sql: step) }
                }
            } catch {
                FileHandle.standardError.write(Data("error: step \(index + 1): \(error)\n".utf8))
                throw ExitCode(65)
            }
            say("step \(index + 1)")
            if pause > 0 { try await Task.sleep(nanoseconds: UInt64(pause * 1e9)) }
        }
        say("ready")
        if hold > 0 { try await Task.sleep(nanoseconds: UInt64(hold * 1e9)) }
        try await document.close(savingChanges: false)
    }

    /// The payload of journal entry `id`: 1 KiB that deflates, different for every entry.
    static func journalPayload(_ id: Int) -> Data {
        Data((0..<1024).map { UInt8(truncatingIfNeeded: ($0 / 8) &* 7 &+ id) })
    }
}

/// Writes a line to standard output at once (unbuffered), so a parent process sees it as it happens.
func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}
