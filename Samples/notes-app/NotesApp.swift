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
/// ```
@main
struct NotesApp: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "notes-app",
        abstract: "A sample app whose notes live in a managed document.")

    @Argument(help: "The document.") var document: String
    @Argument(help: "add, rewrite (replace every note with --bulk notes tagged NOTE) or list") var action: String
    @Argument(help: "Notes to add.") var notes: [String] = []
    @Option(help: "Add this many generated notes with 1 KiB payloads.") var bulk = 0
    @Option(help: "Seconds to keep the document open before saving.") var hold = 0.0
    @Option(help: "Seconds to wait for another writer.") var wait = 0.0
    @Flag(help: "Open read-only.") var readOnly = false

    func run() async throws {
        var options = Document.OpenOptions()
        options.createIfMissing = true
        options.lockTimeout = wait
        options.isReadOnly = readOnly
        let document: Document
        do {
            document = try await Document.open(at: FilePath(self.document), options: options)
        } catch let error as DocumentError {
            FileHandle.standardError.write(Data("error: \(error)\n".utf8))
            throw ExitCode(error.code == .inUse ? 75 : 65)
        }
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
        case "list":
            let texts = try await document.reader.read { db in
                try db.tableExists("note") ? try String.fetchAll(db, sql: "SELECT text FROM note ORDER BY id") : []
            }
            for text in texts { say(text) }
            if hold > 0 { try await Task.sleep(nanoseconds: UInt64(hold * 1e9)) }
            try await document.close(savingChanges: false)
        default:
            throw ValidationError("the action is add, rewrite or list")
        }
    }
}

/// Writes a line to standard output at once (unbuffered), so a parent process sees it as it happens.
func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}
