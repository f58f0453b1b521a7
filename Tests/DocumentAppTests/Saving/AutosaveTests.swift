// Saving, from an app's side (the public API only). Incremental saves: IncrementalSaveTests.swift beside this file;
// segment reuse at the writer, which needs the library's internals: Tests/ManagedDocumentTests/Saving/SegmentReuseTests.swift.

import Foundation
import GRDB
import ManagedDocument
import Synchronization
import SystemPackage
import TestSupport
import Testing

/// The states a document goes through, collected from `stateChanges` as an app's observer would see them.
private final class StateLog: Sendable {
    private final class Box: Sendable { let states = Mutex<[Document.State]>([]) }
    private let box = Box()
    private let task: Task<Void, Never>

    init(_ document: Document) {
        let box = self.box
        let stream = document.stateChanges
        task = Task { for await state in stream { box.states.withLock { $0.append(state) } } }
    }

    deinit { task.cancel() }

    var all: [Document.State] { box.states.withLock { $0 } }

    /// Waits (up to `timeout` seconds) until `state` has been seen `count` times; whether it was.
    func waitFor(_ state: Document.State, count: Int = 1, timeout: Double = 120) async -> Bool {
        await eventually(timeout: timeout) { all.filter({ $0 == state }).count >= count }
    }
}

private func noteCount(_ bundle: FilePath, folder: FilePath) async throws -> Int {
    var options = appOptions(folder)
    options.isReadOnly = true
    options.createIfMissing = false
    options.workingDirectory = folder.appending("readers")
    return try await Document.withDocument(at: bundle, options: options) { document in
        try await document.reader.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM note") ?? 0 }
    }
}

@Suite("Autosave: saves in the background once changes settle, retries after failures, stops at close")
struct AutosaveTests {
    @Test("a change is saved by itself, observed through stateChanges, and the bundle holds it")
    func savesBySelf() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            var options = appOptions(folder)
            options.autosaveInterval = 0.1
            let document = try await Document.open(at: bundle, options: options)
            let log = StateLog(document)
            try await document.writer.write { db in
                try db.execute(sql: "CREATE TABLE note(text TEXT)")
                try db.execute(sql: "INSERT INTO note(text) VALUES ('first')")
            }
            #expect(await log.waitFor(.hasUnsavedChanges))
            #expect(await log.waitFor(.normal), "no autosave: \(log.all)")
            #expect(document.lastSave != nil)
            #expect(try await noteCount(bundle, folder: folder) == 1)

            // The next change is saved too; then close saves nothing more and ends the loop.
            try await document.writer.write { db in try db.execute(sql: "INSERT INTO note(text) VALUES ('second')") }
            #expect(await log.waitFor(.normal, count: 2), "\(log.all)")
            #expect(try await noteCount(bundle, folder: folder) == 2)
            try await document.close()
            #expect(await log.waitFor(.closed))
        }
    }

    @Test("a failed autosave is savingFailed with its error, tried again with backoff, and saved once the cause is gone")
    func retriesAfterFailure() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            var options = appOptions(folder)
            options.autosaveInterval = 0.05
            let document = try await Document.open(at: bundle, options: options)
            try await document.writer.write { db in try db.execute(sql: "CREATE TABLE note(text TEXT)") }
            try await document.save()
            let log = StateLog(document)

            // The bundle's name is taken by a folder: no save can put a file there.
            let away = folder.appending("Notes.away")
            #expect(rename(bundle.string, away.string) == 0)
            #expect(mkdir(bundle.string, 0o755) == 0)
            try await document.writer.write { db in try db.execute(sql: "INSERT INTO note(text) VALUES ('kept')") }
            #expect(await log.waitFor(.savingFailed), "\(log.all)")
            let firstFailure = Date()
            #expect(document.lastSaveError != nil)
            #expect(document.hasUnsavedChanges)
            // Backoff: the waits double (0.1, 0.2, 0.4 s ...), so the 0.8 s after the first failure hold at most three
            // more tries (at 0.1, 0.3 and 0.7 s), not one per 0.05 s. Counted from when the first failure was seen, so
            // a loaded machine, which only stretches the waits, cannot add tries to the window.
            let seen = log.all.filter { $0 == .savingFailed }.count
            try await Task.sleep(nanoseconds: 800_000_000)
            let tries = log.all.filter { $0 == .savingFailed }.count
            #expect(tries >= 2, "one failed try and no second within 0.8 s: \(log.all)")
            #expect(tries - seen <= 4, "\(tries - seen) failed tries in 0.8 s: \(log.all)")

            // The folder goes, the bundle comes back: the next try saves.
            #expect(rmdir(bundle.string) == 0)
            #expect(rename(away.string, bundle.string) == 0)
            // > The next try comes after the current backoff, which a loaded machine may have doubled to tens of
            // > seconds by now (or minutes: a test starved of the cooperative pool while the autosave's own timer goes
            // > on trying). The waits double, so the current one is at most the time since the first failure; the
            // > longest is five minutes.
            let backoff = min(300, Date().timeIntervalSince(firstFailure))
            #expect(await log.waitFor(.normal, timeout: 90 + 2 * backoff), "\(log.all)")
            #expect(document.lastSaveError == nil)
            #expect(try await noteCount(bundle, folder: folder) == 1)
            try await document.close()
        }
    }

    @Test("explicit saves and edits beside autosaves: never two saves at once, nothing lost, close saves the rest")
    func besideExplicitSaves() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            var options = appOptions(folder)
            options.autosaveInterval = 0.02
            let document = try await Document.open(at: bundle, options: options)
            try await document.writer.write { db in try db.execute(sql: "CREATE TABLE note(text TEXT)") }
            for round in 0..<40 {
                try await document.writer.write { db in
                    try db.execute(sql: "INSERT INTO note(text) VALUES (?)", arguments: ["note \(round)"])
                }
                if round % 3 == 0 { try await document.save() }
                try await Task.sleep(nanoseconds: UInt64.random(in: 0...30_000_000))
            }
            try await document.writer.write { db in try db.execute(sql: "INSERT INTO note(text) VALUES ('last')") }
            try await document.close()
            #expect(try await noteCount(bundle, folder: folder) == 41)
            // No autosave after close: the bundle stays as close left it.
            let closed = try FileManager.default.attributesOfItem(atPath: bundle.string)[.modificationDate] as? Date
            try await Task.sleep(nanoseconds: 200_000_000)
            #expect(try FileManager.default.attributesOfItem(atPath: bundle.string)[.modificationDate] as? Date == closed)
        }
    }

    @Test("an interval that is not a positive number of seconds is refused before anything is opened")
    func invalidInterval() async throws {
        try await withTemporaryDirectory { folder in
            for interval in [0, -1, Double.nan, Double.infinity] {
                var options = appOptions(folder)
                options.autosaveInterval = interval
                let error = await #expect(throws: DocumentError.self) {
                    _ = try await Document.open(at: folder.appending("Notes.mdz"), options: options)
                }
                #expect(error?.code == .invalidArgument)
            }
            #expect(!FileManager.default.fileExists(atPath: folder.appending("Notes.mdz").string))
        }
    }
}
