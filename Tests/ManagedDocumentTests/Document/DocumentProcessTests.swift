import Foundation
import GRDB
import LegacySamples
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

@Suite("Documents across processes: one writer, SIGKILL during saves, legacy stores converted on first open")
struct DocumentProcessTests {
    private func notes(in bundle: FilePath, directory: FilePath) async throws -> [String] {
        var options = Document.OpenOptions()
        options.isReadOnly = true
        options.workingDirectory = directory.appending("reader")
        return try await Document.withDocument(at: bundle, options: options) { (document: Document) async throws in
            try await document.reader.read { db in try String.fetchAll(db, sql: "SELECT text FROM note ORDER BY id") }
        }
    }

    @Test("two processes: exactly one writes, the other is refused or waits; a reader is never blocked; SIGKILL releases the lock")
    func twoProcesses() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = directory.appending("Notes.mdz").string
            let first = try NotesApp([bundle, "add", "first", "--hold", "3"], in: directory)
            #expect(first.waitFor("opened"))

            let refused = try NotesApp.run([bundle, "add", "second"], in: directory)
            #expect(refused.status == 75, "\(refused.output)")
            #expect(refused.output.contains("open for writing elsewhere"), "\(refused.output)")

            let reader = try NotesApp.run([bundle, "list", "--read-only"], in: directory)
            #expect(reader.status == 0, "a read-only open is not blocked by the writer: \(reader.output)")

            let waiter = try NotesApp.run([bundle, "add", "third", "--wait", "30"], in: directory)
            #expect(waiter.status == 0, "\(waiter.output)")
            let firstResult = first.finish()
            #expect(firstResult.status == 0, "\(firstResult.output)")
            #expect(try await notes(in: FilePath(bundle), directory: directory) == ["first", "third"])

            // A writer killed while it holds the document: the kernel drops the lock, the next writer gets in at once.
            let killed = try NotesApp([bundle, "add", "never-saved", "--hold", "60"], in: directory)
            #expect(killed.waitFor("opened"))
            kill(killed.process.processIdentifier, SIGKILL)
            _ = killed.finish()
            let after = try NotesApp.run([bundle, "add", "after-kill"], in: directory)
            #expect(after.status == 0, "\(after.output)")
            #expect(try await notes(in: FilePath(bundle), directory: directory) == ["first", "third", "after-kill"])
        }
    }

    @Test("a save killed with SIGKILL at random moments 50 times: the bundle is always the old or the new version, and the next open works")
    func killedSaves() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = directory.appending("Notes.mdz")
            let bulk = "3000"
            #expect(try NotesApp.run([bundle.string, "rewrite", "v0", "--bulk", bulk], in: directory).status == 0)
            // How long one save takes here (from "written" to the exit), to spread the kills over it.
            let probe = try NotesApp([bundle.string, "rewrite", "probe", "--bulk", bulk], in: directory)
            #expect(probe.waitFor("written"))
            let started = Date()
            #expect(probe.finish().status == 0)
            let duration = Date().timeIntervalSince(started)
            var current = "probe"
            var generator = SeededGenerator(seed: 11)
            var outcomes: [String: Int] = [:]
            for trial in 0..<50 {
                let tag = "t\(trial)"
                let app = try NotesApp([bundle.string, "rewrite", tag, "--bulk", bulk], in: directory)
                let reachedSave = app.waitFor("written")
                let delay = Double.random(in: 0...(duration * 1.1), using: &generator)
                try await Task.sleep(nanoseconds: UInt64(delay * 1e9))
                kill(app.process.processIdentifier, SIGKILL)
                let result = app.finish()

                // The bundle under its name is complete and is either the old version or the new one.
                try BundleReader(at: bundle).verifyEntries()
                let texts = try await notes(in: bundle, directory: directory)
                let tags = Set(texts.map { $0.split(separator: "#").first.map(String.init) ?? "" })
                #expect(texts.count == Int(bulk), "trial \(trial): \(texts.count) notes")
                #expect(tags == [current] || tags == [tag], "trial \(trial): \(tags), expected \(current) or \(tag)")
                if tags == [tag] { current = tag }
                outcomes[tags == [tag] ? (result.output.contains("saved") ? "new, saved" : "new, killed after the rename") : (reachedSave ? "old, killed while saving" : "old"), default: 0] += 1
            }
            // The next writer opens at once (the lock died with the process) and its save cleans up the leftovers.
            let next = try NotesApp.run([bundle.string, "rewrite", "final", "--bulk", "10"], in: directory)
            #expect(next.status == 0, "\(next.output)")
            #expect(try await notes(in: bundle, directory: directory).count == 10)
            let leftovers = try FileSystem.contentsOfDirectory(directory).filter { $0.hasSuffix(AtomicFile.temporarySuffix) }
            #expect(leftovers.isEmpty, "\(leftovers)")
            print("save kill outcomes: \(outcomes)")
        }
    }

    @Test("autosaves and incremental saves killed with SIGKILL at random moments: the document always opens and holds a saved prefix of the entries, never less than was saved")
    func killedAutosaves() async throws {
        let trials = Int(ProcessInfo.processInfo.environment["CRASH_TRIALS"] ?? "") ?? 12
        try await withTemporaryDirectory { directory in
            let bundle = directory.appending("Journal.mdz")
            // Over 1 MiB, so that saves reuse segments (FORMAT.md 16.1).
            #expect(try NotesApp.run([bundle.string, "add", "--bulk", "1500"], in: directory).status == 0)
            var generator = SeededGenerator(seed: 23)
            var held = 0  // entries the bundle holds; a kill may lose only what was never saved
            var incremental = 0, explicit = 0, grew = 0
            for trial in 0..<trials {
                let app = try NotesApp([bundle.string, "journal", "--rows", "1000000", "--autosave", "0.03",
                                        "--save-every", "20"], in: directory)
                #expect(app.waitFor("opened"), "trial \(trial): \(app.output)")
                try await Task.sleep(nanoseconds: UInt64(Double.random(in: 0.05...0.9, using: &generator) * 1e9))
                kill(app.process.processIdentifier, SIGKILL)
                let result = app.finish()
                let saves = result.output.split(separator: "\n").filter { $0.hasPrefix("saved ") }
                explicit += saves.count
                incremental += saves.filter { $0.contains("incremental") }.count
                let savedBeforeKill = saves.compactMap { Int($0.split(separator: " ")[1]) }.max() ?? 0

                try BundleReader(at: bundle).verifyEntries()
                var options = Document.OpenOptions()
                options.isReadOnly = true
                options.workingDirectory = directory.appending("reader")
                let entries = try await Document.withDocument(at: bundle, options: options) { (document: Document) async throws in
                    try await document.reader.read { db -> [(id: Int, text: String, payload: Data)] in
                        guard try db.tableExists("entry") else { return [] }
                        return try Row.fetchAll(db, sql: "SELECT id, text, payload FROM entry ORDER BY id").map {
                            ($0["id"], $0["text"], $0["payload"])
                        }
                    }
                }
                let ids = entries.map(\.id)
                #expect(ids == Array(1..<(ids.count + 1)), "trial \(trial): the entries are not a prefix: \(ids.prefix(5))…")
                let wrong = entries.first { $0.text != "entry \($0.id)" || $0.payload != journalPayload($0.id) }
                #expect(wrong == nil, "trial \(trial): entry \(wrong?.id ?? 0) is not what was written")
                #expect(ids.count >= max(held, savedBeforeKill),
                        "trial \(trial): the bundle holds \(ids.count) entries; \(savedBeforeKill) were saved")
                if ids.count > held { grew += 1 }
                held = ids.count
            }
            // The next writer opens at once and cleans up what killed saves left.
            let next = try NotesApp.run([bundle.string, "journal", "--rows", "1"], in: directory)
            #expect(next.status == 0 && next.output.contains("closed \(held + 1)"), "\(next.output)")
            let leftovers = try FileSystem.contentsOfDirectory(directory).filter { $0.hasSuffix(AtomicFile.temporarySuffix) }
            #expect(leftovers.isEmpty, "\(leftovers)")
            #expect(incremental > 0, "no explicit save was incremental")
            print("killed autosaves: \(trials) trials, the bundle grew in \(grew), \(held) entries held; explicit saves \(explicit), incremental \(incremental)")
        }
    }

    /// notes-app's journal payload for entry `id` (the same formula).
    private func journalPayload(_ id: Int) -> Data {
        Data((0..<1024).map { UInt8(truncatingIfNeeded: ($0 / 8) &* 7 &+ id) })
    }

    @Test("the default working-copies folder: made 0700, made private again when loose, refused when planted as a link")
    func defaultWorkingFolder() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = directory.appending("Notes.mdz")
            let root = directory.appending("state").appending("ManagedDocument")
            #expect(try NotesApp.run([bundle.string, "add", "first"], in: directory).status == 0)
            var info = stat()
            #expect(lstat(root.string, &info) == 0 && info.st_mode & 0o7777 == 0o700 && info.st_uid == geteuid())

            // Left loose (as an older release made it): made private again.
            #expect(chmod(root.string, 0o755) == 0)
            #expect(try NotesApp.run([bundle.string, "add", "second"], in: directory).status == 0)
            #expect(lstat(root.string, &info) == 0 && info.st_mode & 0o7777 == 0o700)

            // Planted as a symbolic link to somewhere else: refused, nothing written there.
            try FileSystem.removeTree(root)
            let elsewhere = directory.appending("elsewhere")
            try FileSystem.createDirectory(elsewhere)
            #expect(symlink(elsewhere.string, root.string) == 0)
            let planted = try NotesApp.run([bundle.string, "add", "third"], in: directory)
            #expect(planted.status != 0)
            #expect(planted.output.contains("is a symbolic link"), "\(planted.output)")
            #expect(try FileSystem.contentsOfDirectory(elsewhere).isEmpty)
            #expect(try await notes(in: bundle, directory: directory) == ["first", "second"])
        }
    }

    @Test("unsaved work of a killed writer is recovered on the next open, or discarded, as the app chooses")
    func crashRecovery() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = directory.appending("Notes.mdz")
            #expect(try NotesApp.run([bundle.string, "add", "saved"], in: directory).status == 0)
            let saved = try Fixtures.bytes(of: bundle)
            var options = Document.OpenOptions()
            options.workingDirectory = directory.appending("state").appending("ManagedDocument")  // the app's default

            for policy in [Document.RecoveryPolicy.recover, .discard] {
                let app = try NotesApp([bundle.string, "add", "unsaved", "--hold", "60"], in: directory)
                #expect(app.waitFor("written"))
                kill(app.process.processIdentifier, SIGKILL)
                _ = app.finish()
                #expect(try Fixtures.bytes(of: bundle) == saved, "the crash did not touch the bundle")

                options.recovery = policy
                let document = try await Document.open(at: bundle, options: options)
                let texts = try await document.reader.read { db in
                    try String.fetchAll(db, sql: "SELECT text FROM note ORDER BY id")
                }
                if policy == .recover {
                    #expect(texts == ["saved", "unsaved"])
                    #expect(document.state == .hasUnsavedChanges)
                } else {
                    #expect(texts == ["saved"])
                    #expect(document.state == .normal)
                }
                try await document.close(savingChanges: false)
                #expect(try Fixtures.bytes(of: bundle) == saved)
                #expect(try FileSystem.contentsOfDirectory(options.workingDirectory!).isEmpty,
                        "closing removes the working copy")
            }
        }
    }

    @Test("a legacy store beside the document is converted on first open, with every row, and not again",
          arguments: ["TasteB", "minimalTime", "Diary", "Recipes", "Ledger"])
    func legacyFirst(name: String) async throws {
        try await withTemporaryDirectory { directory in
            let samples = try LegacySamples.makeAll(in: directory)
            let sample = try #require(samples.first { $0.name == name })
            let source = directory.appending(sample.source)
            let store = sample.kind == "uimanageddocument-package"
                ? source.appending("StoreContent").appending("persistentStore") : source
            let expected = try Fixtures.digestsAsSQLiteReads(store)

            var options = Document.OpenOptions()
            options.workingDirectory = directory.appending("working")
            let bundle = directory.appending(name + ".mdz")
            let document = try await Document.open(at: bundle, options: options)
            let report = try #require(document.conversionReport, "a conversion should have happened")
            #expect(report.kind.rawValue == sample.kind)
            #expect(try Fixtures.rowDigests(of: document.workingCopyStoreForTests) == expected)
            #expect(!(try FileSystem.exists(source)), "the default policy moves the legacy store to the backup folder")
            #expect(FileSystem.isDirectory(directory.appending("docconvert-backup")))
            try await document.close()

            let again = try await Document.open(at: bundle, options: options)
            #expect(again.conversionReport == nil, "a second open must not convert again")
            #expect(try Fixtures.rowDigests(of: again.workingCopyStoreForTests) == expected)
            try await again.close()
        }
    }

    @Test("a legacy store at an explicit location is converted with the app's policy")
    func legacyAtExplicitLocation() async throws {
        try await withTemporaryDirectory { directory in
            let old = directory.appending("Library")
            try FileManager.default.createDirectory(atPath: old.string, withIntermediateDirectories: true)
            let sample = try LegacySamples.makeTimeStore(in: old)
            let source = old.appending(sample.source)
            let before = try Fixtures.fileHashes(old)
            let expected = try Fixtures.digestsAsSQLiteReads(source)

            var options = Document.OpenOptions()
            options.workingDirectory = directory.appending("working")
            options.legacyStoreLocations = [directory.appending("nowhere.sqlite"), source]
            options.conversion.legacyPolicy = .keep
            let bundle = directory.appending("Documents").appending("Time.mdz")
            try FileManager.default.createDirectory(atPath: bundle.removingLastComponent().string,
                                                    withIntermediateDirectories: true)
            try await Document.withDocument(at: bundle, options: options) { (document: Document) async throws in
                #expect(document.conversionReport != nil)
                #expect(try Fixtures.rowDigests(of: document.workingCopyStoreForTests) == expected)
            }
            #expect(try Fixtures.fileHashes(old) == before, "keep leaves every legacy file byte-identical")
            #expect(try Fixtures.bundleDigests(bundle) == expected)
        }
    }
}
