// Where an app's working copies live when it does not say: a per-user state folder a reboot does not empty
// ($XDG_STATE_HOME, else ~/.local/state), and what happens to unsaved commits when that folder is held in memory
// instead. Through the public API and the sample app, as an app meets it.
import Foundation
import GRDB
import Logging
import ManagedDocument
import SystemPackage
import Testing
import TestSupport

/// Collects the messages logged at warning level or above.
private final class Warnings: @unchecked Sendable {  // every access under `lock`
    private let lock = NSLock()
    private var messages: [String] = []
    var all: [String] { lock.withLock { messages } }
    func append(_ message: String) { lock.withLock { messages.append(message) } }
}

private struct CollectingHandler: LogHandler {
    let warnings: Warnings
    var logLevel: Logger.Level = .warning
    var metadata: Logger.Metadata = [:]
    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }
    func log(level: Logger.Level, message: Logger.Message, metadata: Logger.Metadata?, source: String, file: String,
             function: String, line: UInt) {
        if level >= .warning { warnings.append(message.description) }
    }
}

@Suite("Where working copies live", .serialized, .serialChain)
struct WorkingCopyPlaceTests {
    private func notesApp(_ arguments: [String], environment changes: [String: String?]) throws
    -> (status: Int32, stdout: String, stderr: String) {
        var environment = ProcessInfo.processInfo.environment
        for (name, value) in changes { environment[name] = value }
        return try execute(builtProduct("notes-app"), arguments, environment: environment)
    }

    private func mode(_ path: FilePath) -> mode_t? {
        var info = stat()
        return lstat(path.string, &info) == 0 ? info.st_mode & 0o7777 : nil
    }

    @Test("by default: $XDG_STATE_HOME/ManagedDocument, else ~/.local/state/ManagedDocument (a relative XDG_STATE_HOME ignored), each made 0700")
    func defaultPlace() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            let state = folder.appending("state")
            let home = folder.appending("home")
            try FileManager.default.createDirectory(atPath: home.string, withIntermediateDirectories: true)

            let first = try notesApp([bundle.string, "add", "one", "--hold", "0"],
                                     environment: ["XDG_STATE_HOME": state.string, "HOME": home.string])
            #expect(first.status == 0, "\(first.stderr)")
            #expect(mode(state.appending("ManagedDocument")) == 0o700)
            #expect(mode(state) == 0o700, "a missing XDG base folder is made 0700, as the specification asks")
            #expect(mode(home.appending(".local/state/ManagedDocument")) == nil)

            for xdg in [nil, "relative/state"] as [String?] {
                let run = try notesApp([bundle.string, "add", "two", "--hold", "0"],
                                       environment: ["XDG_STATE_HOME": xdg, "HOME": home.string])
                #expect(run.status == 0, "\(run.stderr)")
                #expect(mode(home.appending(".local/state/ManagedDocument")) == 0o700, "XDG_STATE_HOME=\(xdg ?? "unset")")
                #expect(!FileManager.default.fileExists(atPath: folder.appending("relative").string))
            }

            // > Another user that kept this one's HOME (setpriv, sudo without -H) and has no home of its own
            // > (nobody's is /nonexistent): the per-uid folder under TMPDIR, nothing in the other's home.
            guard getuid() == 0 else { return }
            let temporary = folder.appending("tmp")
            try FileManager.default.createDirectory(atPath: temporary.string, withIntermediateDirectories: true)
            #expect(chmod(temporary.string, 0o1777) == 0 && chmod(folder.string, 0o777) == 0)
            let other = folder.appending("Other.mdz")
            var environment = ProcessInfo.processInfo.environment
            environment["XDG_STATE_HOME"] = nil
            environment["HOME"] = home.string
            environment["TMPDIR"] = temporary.string
            let run = try execute("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", "--",
                                                       builtProduct("notes-app"), other.string, "add", "x"],
                                  environment: environment)
            #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
            #expect(mode(temporary.appending("ManagedDocument-65534")) == 0o700)
        }
    }

    @Test("a read-only open never touches the state folder; a writable one whose state folder is on a read-only file system works from TMPDIR",
          .enabled(if: getuid() == 0, "mounting a read-only tmpfs needs root (permissions do not stop root)"))
    func readOnlyHome() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            #expect(try notesApp([bundle.string, "add", "one"], environment: ["XDG_STATE_HOME": folder.appending("state").string]).status == 0)
            let home = folder.appending("home")
            try FileManager.default.createDirectory(atPath: home.string, withIntermediateDirectories: true)
            let mounted = try execute("mount", ["-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", home.string])
            try #require(mounted.status == 0, "root, but cannot mount a tmpfs here: \(mounted.stderr)")
            defer { _ = try? execute("umount", ["-l", home.string]) }
            let temporary = folder.appending("tmp")
            try FileManager.default.createDirectory(atPath: temporary.string, withIntermediateDirectories: true)
            let environment = ["XDG_STATE_HOME": home.appending("state").string, "TMPDIR": temporary.string]

            let listed = try notesApp([bundle.string, "list", "--read-only"], environment: environment)
            #expect(listed.status == 0 && listed.stdout.contains("one"), "\(listed.stdout)\(listed.stderr)")
            let added = try notesApp([bundle.string, "add", "two"], environment: environment)
            #expect(added.status == 0, "\(added.stdout)\(added.stderr)")
            #expect(mode(temporary.appending("ManagedDocument-\(geteuid())")) == 0o700)
            let again = try notesApp([bundle.string, "list", "--read-only"], environment: environment)
            #expect(again.stdout.contains("two"), "\(again.stdout)")
        }
    }

    @Test("a working copy held in memory (tmpfs): the document says so, the log says it once, and a reboot loses its unsaved commit where the default folder keeps it",
          .enabled(if: getuid() == 0, "mounting a tmpfs needs root"))
    func inMemory() async throws {
        try await withTemporaryDirectory { folder in
            let memory = folder.appending("memory")
            try FileManager.default.createDirectory(atPath: memory.string, withIntermediateDirectories: true)
            let mounted = try execute("mount", ["-t", "tmpfs", "-o", "size=32m", "tmpfs", memory.string])
            try #require(mounted.status == 0, "root, but cannot mount a tmpfs here: \(mounted.stderr)")
            defer { _ = try? execute("umount", ["-l", memory.string]) }

            let warnings = Warnings()
            var options = Document.OpenOptions()
            options.createIfMissing = true
            options.workingDirectory = memory.appending("working")
            options.logger = Logger(label: "test") { _ in CollectingHandler(warnings: warnings) }
            for name in ["A.mdz", "B.mdz"] {
                let document = try await Document.open(at: folder.appending(name), options: options)
                #expect(document.workingCopyIsVolatile)
                try await document.close()
            }
            #expect(warnings.all.filter { $0.contains("tmpfs") }.count == 1, "\(warnings.all)")
            options.workingDirectory = folder.appending("disk")
            let onDisk = try await Document.open(at: folder.appending("C.mdz"), options: options)
            #expect(!onDisk.workingCopyIsVolatile)
            try await onDisk.close()

            // > An app killed with one commit unsaved, then the machine restarted (the tmpfs mounted afresh):
            // > recovery finds it in the default folder on disk, and nothing in a folder held in memory.
            for (state, survives) in [(memory.appending("state"), false), (folder.appending("state"), true)] {
                let bundle = folder.appending(survives ? "OnDisk.mdz" : "InMemory.mdz")
                #expect(try notesApp([bundle.string, "add", "saved", "--hold", "0"],
                                     environment: ["XDG_STATE_HOME": state.string]).status == 0)
                var environment = ProcessInfo.processInfo.environment
                environment["XDG_STATE_HOME"] = state.string
                let held = Process()
                held.executableURL = URL(fileURLWithPath: builtProduct("notes-app"))
                held.arguments = [bundle.string, "add", "unsaved", "--hold", "60"]
                held.environment = environment
                let pipe = Pipe()
                held.standardOutput = pipe
                held.standardError = pipe
                try held.run()
                var output = ""
                while !output.contains("written") {
                    let data = pipe.fileHandleForReading.availableData
                    if data.isEmpty { break }
                    output += String(decoding: data, as: UTF8.self)
                }
                #expect(output.contains("written"), "\(output)")
                kill(held.processIdentifier, SIGKILL)
                held.waitUntilExit()
                if !survives {
                    #expect(try execute("umount", [memory.string]).status == 0)
                    #expect(try execute("mount", ["-t", "tmpfs", "-o", "size=32m", "tmpfs", memory.string]).status == 0)
                }
                var recovering = Document.OpenOptions()
                recovering.recovery = .recover
                recovering.workingDirectory = state.appending("ManagedDocument")
                let document = try await Document.open(at: bundle, options: recovering)
                let notes = try await document.reader.read { db in
                    try String.fetchAll(db, sql: "SELECT text FROM note ORDER BY rowid")
                }
                try await document.close(savingChanges: false)
                #expect(notes == (survives ? ["saved", "unsaved"] : ["saved"]), "\(state): \(notes)")
            }
        }
    }
}
