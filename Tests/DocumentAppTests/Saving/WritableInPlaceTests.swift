// Writable documents served from their bundle (FORMAT.md 16.2), from an app's side (the public API only): nothing of
// the store extracted, saves that copy what no write touched, revert, recovery after SIGKILL, and a bundle replaced
// under a working copy. The overlay itself: Tests/ManagedDocumentTests/Document/Overlay/.

import Foundation
import GRDB
import ManagedDocument
import SystemPackage
import TestSupport
import Testing

/// Every file below `folder`, relative names.
private func files(below folder: FilePath) -> [String] {
    (FileManager.default.enumerator(atPath: folder.string)?.allObjects as? [String]) ?? []
}

/// The bytes a file takes on disk (its allocated blocks: a sparse overlay counts only what it holds); -1 when absent.
private func allocated(_ path: FilePath) -> Int64 {
    var info = stat()
    guard lstat(path.string, &info) == 0 else { return -1 }
    return Int64(info.st_blocks) * 512
}


/// Makes a document of `rows` text rows of about 3 KiB each (1600 rows: about 5 MiB, deflated with a restart index
/// and segment digests).
private func makeDocument(_ bundle: FilePath, folder: FilePath, rows: Int = 1600) async throws {
    var options = appOptions(folder)
    options.workingDirectory = folder.appending("maker")
    let document = try await Document.open(at: bundle, options: options)
    var generator = SeededGenerator(seed: 11)
    let bodies = (0..<rows).map { _ in words(380, &generator) }
    try await document.writer.write { db in
        try db.execute(sql: "CREATE TABLE note(id INTEGER PRIMARY KEY, body TEXT, n INTEGER)")
        for (index, body) in bodies.enumerated() {
            try db.execute(sql: "INSERT INTO note(id, body, n) VALUES (?, ?, 0)", arguments: [index + 1, body])
        }
    }
    try await document.close()
}

/// The model of a bundle's store: a plain SQLite copy of it, extracted, that tests change with the same SQL.
private func model(of bundle: FilePath, folder: FilePath) throws -> DatabaseQueue {
    let extracted = try BundleReader(at: bundle).extract(into: folder.appending("model-\(UUID().uuidString)"))
    return try DatabaseQueue(path: extracted.store.string)
}

/// Runs the same statement on a document and on its model.
private func change(_ sql: String, _ document: Document, _ model: DatabaseQueue) async throws {
    try await document.writer.write { db in try db.execute(sql: sql) }
    try await model.write { db in try db.execute(sql: sql) }
}




@Suite("Writable documents served from the bundle: nothing extracted, saves that copy what no write touched")
struct WritableInPlaceTests {
    @Test("a 5 MiB document opens for writing with no store extracted; one row changed saves incrementally")
    func openAndSaveOneRow() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            try await makeDocument(bundle, folder: folder)
            #expect(try BundleReader(at: bundle).metadata.store.size >= 4 << 20)
            let model = try model(of: bundle, folder: folder)
            let options = appOptions(folder)
            let working = try #require(options.workingDirectory)
            let document = try await Document.open(at: bundle, options: options)
            let listed = files(below: working)
            #expect(!listed.contains { $0.hasSuffix("persistentStore") }, "extracted: \(listed)")
            let overlay = try #require(listed.first { $0.hasSuffix("/overlay") }.map { working.appending($0) })
            #expect(allocated(overlay) < 64 << 10, "overlay: \(allocated(overlay)) bytes")

            try await change("UPDATE note SET n = n + 1 WHERE id = 800", document, model)
            #expect(document.state == .hasUnsavedChanges)
            #expect(allocated(overlay) < 1 << 20, "overlay: \(allocated(overlay)) bytes")
            try await document.save()
            let report = try #require(document.lastSave)
            #expect(report.mode == .incremental && report.reusedSegments * 10 >= report.segments * 9, "\(report)")
            #expect(document.state == .normal)
            _ = try BundleReader(at: bundle).verify(full: true, workingDirectory: folder)
            let expected = try await model.read { db in try StoreContent(db) }
            #expect(try await bundleContent(bundle, folder: folder) == expected)
            #expect(try await document.reader.read { db in try StoreContent(db) } == expected)
            try await document.close()
            #expect(try await bundleContent(bundle, folder: folder) == expected)
        }
    }

    @Test("write, save, write, revert, write, save, close, reopen, autosave: the bundle equals the model at each step")
    func sequence() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            try await makeDocument(bundle, folder: folder)
            let model = try model(of: bundle, folder: folder)
            let document = try await Document.open(at: bundle, options: appOptions(folder))
            try await change("UPDATE note SET body = 'first' WHERE id = 3", document, model)
            try await document.save()
            #expect(document.lastSave?.mode == .incremental, "\(String(describing: document.lastSave))")

            try await document.writer.write { db in
                try db.execute(sql: "DELETE FROM note WHERE id > 1000")
                try db.execute(sql: "CREATE TABLE dropped(x)")
            }
            try await document.revert()
            #expect(document.state == .normal)
            let saved = try await model.read { db in try StoreContent(db) }
            #expect(try await document.reader.read { db in try StoreContent(db) } == saved, "reverted")

            try await change("INSERT INTO note(id, body, n) VALUES (5000, 'appended', 1)", document, model)
            try await document.save()
            #expect(document.lastSave?.mode == .incremental, "\(String(describing: document.lastSave))")
            try await document.close()
            let expected = try await model.read { db in try StoreContent(db) }
            #expect(try await bundleContent(bundle, folder: folder) == expected)

            var options = appOptions(folder)
            options.autosaveInterval = 0.1
            let reopened = try await Document.open(at: bundle, options: options)
            #expect(try await reopened.reader.read { db in try StoreContent(db) } == expected)
            try await change("UPDATE note SET n = 7 WHERE id < 20", reopened, model)
            var waited = 0
            while reopened.state != .normal, waited < 400 {
                try await Task.sleep(nanoseconds: 50_000_000)
                waited += 1
            }
            #expect(reopened.state == .normal, "autosaved")
            try await reopened.close(savingChanges: false)
            _ = try BundleReader(at: bundle).verify(full: true, workingDirectory: folder)
            let autosaved = try await model.read { db in try StoreContent(db) }
            #expect(try await bundleContent(bundle, folder: folder) == autosaved)
        }
    }

    @Test("calls at odd moments: two saves in a row, a save while a write runs, a revert right after a save")
    func oddMoments() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            try await makeDocument(bundle, folder: folder)
            let model = try model(of: bundle, folder: folder)
            let document = try await Document.open(at: bundle, options: appOptions(folder))
            try await change("UPDATE note SET n = 2 WHERE id = 10", document, model)
            try await document.save()
            try await document.save()
            let again = try #require(document.lastSave)
            #expect(again.mode == .incremental && again.deflatedSegments <= 1, "nothing changed: \(again)")

            let writer = try document.writer
            let inserts = Task {
                try await writer.write { db in
                    for id in 6000..<6300 {
                        try db.execute(sql: "INSERT INTO note(id, body, n) VALUES (?, 'while saving', 3)", arguments: [id])
                    }
                }
            }
            try await document.save()
            try await inserts.value
            try await model.write { db in
                for id in 6000..<6300 {
                    try db.execute(sql: "INSERT INTO note(id, body, n) VALUES (?, 'while saving', 3)", arguments: [id])
                }
            }
            try await document.save()
            try await document.revert()
            #expect(document.state == .normal)
            let expected = try await model.read { db in try StoreContent(db) }
            #expect(try await document.reader.read { db in try StoreContent(db) } == expected)
            try await document.close()
            _ = try BundleReader(at: bundle).verify(full: true, workingDirectory: folder)
            #expect(try await bundleContent(bundle, folder: folder) == expected)
        }
    }

    @Test("a writer killed after a committed write: the next open with .recover has that write")
    func killedAfterCommit() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            let made = try NotesApp([bundle.string, "add", "--bulk", "4000"], in: folder).finish()
            #expect(made.status == 0, "\(made.output)")
            let saved = try Data(contentsOf: URL(fileURLWithPath: bundle.string))
            let app = try NotesApp([bundle.string, "add", "unsaved", "--hold", "60"], in: folder)
            #expect(app.waitFor("written"))
            kill(app.process.processIdentifier, SIGKILL)
            _ = app.finish()
            #expect(try Data(contentsOf: URL(fileURLWithPath: bundle.string)) == saved, "the bundle is untouched")
            let working = childWorkingDirectory(folder)
            #expect(!files(below: working).contains { $0.hasSuffix("persistentStore") })

            var options = appOptions(folder)
            options.workingDirectory = working
            options.recovery = .recover
            let document = try await Document.open(at: bundle, options: options)
            #expect(document.state == .hasUnsavedChanges)
            let count = try await document.reader.read { db in
                try Int.fetchOne(db, sql: "SELECT count(*) FROM note WHERE text = 'unsaved'")
            }
            #expect(count == 1)
            try await document.close(savingChanges: true)
            _ = try BundleReader(at: bundle).verify(full: true, workingDirectory: folder)
        }
    }

    @Test("SIGKILL at random moments of a writer that saves often: the bundle is always a save, recovery has every commit")
    func killedDuringSaves() async throws {
        let trials = Int(ProcessInfo.processInfo.environment["KILL_WRITABLE_TRIALS"] ?? "") ?? 12
        let seed = UInt64(ProcessInfo.processInfo.environment["KILL_WRITABLE_SEED"] ?? "") ?? 20261126
        var generator = SeededGenerator(seed: seed)
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            let made = try NotesApp([bundle.string, "add", "--bulk", "4000"], in: folder).finish()
            #expect(made.status == 0, "\(made.output)")
            var options = appOptions(folder)
            options.workingDirectory = childWorkingDirectory(folder)
            options.recovery = .recover
            var known = 0  // entries recovered and saved so far: never lost
            var outcomes = (bundleAdvanced: 0, recoveredUnsaved: 0, killedWhileSaving: 0)
            for trial in 0..<trials {
                let app = try NotesApp([bundle.string, "journal", "--rows", "300", "--save-every", "7", "--echo"], in: folder)
                let delay = 200_000_000 + generator.next() % 2_300_000_000
                try await Task.sleep(nanoseconds: delay)
                kill(app.process.processIdentifier, SIGKILL)
                let output = app.finish().output
                let committed = output.split(separator: "\n").compactMap { line -> Int? in
                    line.hasPrefix("committed ") ? Int(line.dropFirst("committed ".count)) : nil
                }.max() ?? known
                let context = "trial \(trial) (seed \(seed), killed after \(delay / 1_000_000) ms)"

                // The bundle: a whole save, old or new, never a mix.
                _ = try BundleReader(at: bundle).verify(full: true, workingDirectory: folder)
                let inBundle = try await withReadOnly(bundle, folder: folder) { db in try journalIDs(db) }
                let saved = try #require(inBundle, "\(context): a payload in the bundle does not match")
                #expect(saved == (0..<saved.count).map { $0 + 1 }, "\(context): \(saved.suffix(3))")
                #expect(saved.count >= known, "\(context): the bundle lost saved entries")

                // Recovery: every committed entry, and at most the one that was committing.
                let document = try await Document.open(at: bundle, options: options)
                let recovered = try #require(try await document.reader.read { db in try journalIDs(db) }, "\(context)")
                #expect(recovered == (0..<recovered.count).map { $0 + 1 }, "\(context)")
                #expect(recovered.count >= committed && recovered.count <= committed + 1,
                        "\(context): recovered \(recovered.count), last committed \(committed)")
                #expect(recovered.count >= saved.count, "\(context)")
                try await document.close(savingChanges: true)
                if saved.count > known { outcomes.bundleAdvanced += 1 }
                if recovered.count > saved.count { outcomes.recoveredUnsaved += 1 }
                // > The app says "saved N" once a save returned: a kill after the last commit before it hit that save.
                let lastSaved = output.split(separator: "\n").last { $0.hasPrefix("saved ") || $0.hasPrefix("committed ") }
                if let lastSaved, lastSaved.hasPrefix("committed "), committed % 7 == 0 { outcomes.killedWhileSaving += 1 }
                known = recovered.count
            }
            print("kill-writable: \(trials) trials (seed \(seed)): the bundle advanced in \(outcomes.bundleAdvanced), "
                  + "recovery had unsaved commits in \(outcomes.recoveredUnsaved), killed during a save in \(outcomes.killedWhileSaving)")
        }
    }

    @Test("a bundle replaced by another program while a working copy has unsaved changes: recovery refuses, removes nothing")
    func replacedUnderWorkingCopy() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            let made = try NotesApp([bundle.string, "add", "--bulk", "4000"], in: folder).finish()
            #expect(made.status == 0, "\(made.output)")
            let elsewhere = folder.appending("Other.mdz")
            try FileManager.default.copyItem(atPath: bundle.string, toPath: elsewhere.string)
            let app = try NotesApp([bundle.string, "add", "unsaved", "--hold", "60"], in: folder)
            #expect(app.waitFor("written"))
            kill(app.process.processIdentifier, SIGKILL)
            _ = app.finish()

            // Another program saves another version and puts it in place.
            let other = try NotesApp([elsewhere.string, "add", "from elsewhere"], in: folder.appending("other")).finish()
            #expect(other.status == 0, "\(other.output)")
            #expect(rename(elsewhere.string, bundle.string) == 0)

            let working = childWorkingDirectory(folder)
            let before = files(below: working).sorted().map { ($0, allocated(working.appending($0))) }
            var options = appOptions(folder)
            options.workingDirectory = working
            options.recovery = .recover
            let error = await #expect(throws: DocumentError.self) { _ = try await Document.open(at: bundle, options: options) }
            #expect(error?.code == .metadataMismatch, "\(String(describing: error))")
            #expect(error?.reason.contains("nothing was removed") == true, "\(String(describing: error))")
            let after = files(below: working).sorted().map { ($0, allocated(working.appending($0))) }
            #expect(before.map(\.0) == after.map(\.0) && before.map(\.1) == after.map(\.1), "the working copy is untouched")

            options.recovery = .discard
            let document = try await Document.open(at: bundle, options: options)
            let texts = try await document.reader.read { db in try String.fetchAll(db, sql: "SELECT text FROM note WHERE text NOT LIKE 'note %'") }
            #expect(texts == ["from elsewhere"])
            try await document.close(savingChanges: false)
        }
    }

    @Test("a version 1 bundle opens for writing with no store extracted, and saves as version 3")
    func version1() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("large.mdz")
            let fixture = FilePath(#filePath).removingLastComponent().removingLastComponent().removingLastComponent()
                .appending("Fixtures").appending("format-1").appending("large.mdz")
            try FileManager.default.copyItem(atPath: fixture.string, toPath: bundle.string)
            #expect(try BundleReader(at: bundle).metadata.formatVersion == 1)
            let model = try model(of: bundle, folder: folder)
            let options = appOptions(folder)
            let document = try await Document.open(at: bundle, options: options)
            #expect(!files(below: try #require(options.workingDirectory)).contains { $0.hasSuffix("persistentStore") })
            try await change("UPDATE note SET title = 'changed' WHERE id = 7", document, model)
            try await document.save()
            try await document.close()
            let saved = try BundleReader(at: bundle)
            #expect(saved.metadata.formatVersion == 3 && saved.metadata.store.digest?.count == 64)
            _ = try saved.verify(full: true, workingDirectory: folder)
            let expected = try await model.read { db in try StoreContent(db) }
            #expect(try await bundleContent(bundle, folder: folder) == expected)
        }
    }
}

/// Runs `body` on a read-only open of `bundle`.
private func withReadOnly<T: Sendable>(_ bundle: FilePath, folder: FilePath,
                                       _ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
    var options = appOptions(folder)
    options.isReadOnly = true
    options.createIfMissing = false
    let document = try await Document.open(at: bundle, options: options)
    let result = try await document.reader.read(body)
    try await document.close()
    return result
}
