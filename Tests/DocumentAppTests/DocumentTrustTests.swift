import Foundation
import GRDB
import ManagedDocument
import Synchronization
import SystemPackage
import TestSupport
import Testing

/// The nine things an app relies on, each tried the way an app would, through the public API only.
@Suite("Documents an app can trust: no edit lost, private files, another app's document left alone")
struct DocumentTrustTests {
    // 1
    @Test("a second close() of a closed document is a no-op and never touches a later open's working copy")
    func secondCloseIsHarmless() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            let first = try await Document.open(at: bundle, options: appOptions(folder))
            try await first.writer.write { db in try db.execute(sql: "CREATE TABLE note(text); INSERT INTO note VALUES ('one')") }
            try await first.close()
            let second = try await Document.open(at: bundle, options: appOptions(folder))
            try await second.writer.write { db in try db.execute(sql: "INSERT INTO note VALUES ('two')") }
            try await first.close()  // again: must do nothing
            try await first.close(savingChanges: false)
            #expect(first.state == .closed)
            #expect(second.state == .hasUnsavedChanges)
            try await second.close()
            let content = try await bundleContent(bundle, folder: folder)
            #expect(content.tables["note"]?.hasPrefix("2:") == true, "\(content)")
            // A closed document answers with its own code, never touching anything.
            for attempt in 0..<3 {
                let error = await #expect(throws: DocumentError.self) {
                    switch attempt {
                    case 0: try await first.save()
                    case 1: try await first.revert()
                    default: _ = try first.writer
                    }
                }
                #expect(error?.code == .closed)
            }
        }
    }

    // 2
    @Test("schema-only edits, pragmas and VACUUM count as changes and are saved", arguments: [
        "CREATE TABLE x(a, b)", "PRAGMA user_version = 7", "VACUUM", "CREATE INDEX i ON note(text)",
        "DROP TABLE note", "ALTER TABLE note ADD COLUMN extra",
    ])
    func everyCommittedChangeIsSaved(sql: String) async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            try await Document.withDocument(at: bundle, options: appOptions(folder)) { document in
                try await document.writer.write { db in
                    try db.execute(sql: "CREATE TABLE note(text)")
                    for index in 0..<200 { try db.execute(sql: "INSERT INTO note VALUES (?)", arguments: ["n\(index)"]) }
                    try db.execute(sql: "DELETE FROM note WHERE rowid % 2 = 0")  // free pages, so VACUUM changes the file
                }
            }
            let before = try await bundleContent(bundle, folder: folder)
            let expected = try await Document.withDocument(at: bundle, options: appOptions(folder)) { document in
                #expect(document.state == .normal)
                try await document.writer.writeWithoutTransaction { db in try db.execute(sql: sql) }
                #expect(document.state == .hasUnsavedChanges, "\(sql) is a change")
                return try await document.reader.read { db in try StoreContent(db) }
            }
            let after = try await bundleContent(bundle, folder: folder)
            #expect(after == expected, "\(sql): the bundle has what the document had")
            if sql != "VACUUM" { #expect(after != before, "\(sql) changed the content") }
        }
    }

    @Test("reads, empty writes and rolled-back writes are not changes")
    func noChangeIsNoChange() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            let document = try await Document.open(at: bundle, options: appOptions(folder))
            try await document.writer.write { db in try db.execute(sql: "CREATE TABLE note(text)") }
            try await document.save()
            let saved = try Data(contentsOf: URL(fileURLWithPath: bundle.string))
            try await document.writer.write { db in _ = try Int.fetchOne(db, sql: "SELECT count(*) FROM note") }
            _ = try? await document.writer.write { db in
                try db.execute(sql: "INSERT INTO note VALUES ('gone')")
                throw CancellationError()
            }
            try await document.writer.write { _ in }
            #expect(document.state == .normal)
            try await document.close()
            #expect(try Data(contentsOf: URL(fileURLWithPath: bundle.string)) == saved, "nothing to save, nothing saved")
        }
    }

    // 3
    @Test("a save keeps the bundle's permissions; a new bundle follows the umask")
    func savesKeepPermissions() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Private.mdz")
            let document = try await Document.open(at: bundle, options: appOptions(folder))
            #expect(try mode(of: bundle).permissions == 0o666 & ~currentUmask())
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: bundle.string)
            try await document.writer.write { db in try db.execute(sql: "CREATE TABLE t(x); INSERT INTO t VALUES (1)") }
            try await document.save()
            #expect(try mode(of: bundle).permissions == 0o600)
            try FileManager.default.setAttributes([.posixPermissions: 0o640], ofItemAtPath: bundle.string)
            try await document.writer.write { db in try db.execute(sql: "INSERT INTO t VALUES (2)") }
            try await document.close()
            #expect(try mode(of: bundle).permissions == 0o640)
        }
    }

    @Test("a document converted from a private legacy store is as private as the store was")
    func convertedStaysPrivate() async throws {
        try await withTemporaryDirectory { folder in
            let store = folder.appending("Diary.sqlite")
            let queue = try DatabaseQueue(path: store.string)
            try await queue.write { db in try db.execute(sql: "CREATE TABLE entry(text); INSERT INTO entry VALUES ('dear diary')") }
            try queue.close()
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: store.string)
            var options = appOptions(folder)
            options.createIfMissing = false
            let bundle = folder.appending("Diary.mdz")
            let document = try await Document.open(at: bundle, options: options)
            #expect(document.conversionReport != nil)
            #expect(try mode(of: bundle).permissions == 0o600)
            try await document.close()
        }
    }

    // 4
    @Test("working copies are private: a 0700 folder of the user's, 0600 files, unreadable by another uid")
    func workingCopiesArePrivate() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Secret.mdz")
            var options = appOptions(folder)
            options.workingDirectory = nil  // the default root, under XDG_STATE_HOME (or ~/.local/state)
            let document = try await Document.open(at: bundle, options: options)
            try await document.writer.write { db in try db.execute(sql: "CREATE TABLE secret(x); INSERT INTO secret VALUES ('s3cr3t')") }
            let environment = ProcessInfo.processInfo.environment
            let perUser = environment["XDG_STATE_HOME"].flatMap { $0.hasPrefix("/") ? FilePath($0) : nil }
                .map { $0.appending("ManagedDocument") }
                ?? FilePath(environment["HOME"] ?? "/").appending(".local/state/ManagedDocument")
            #expect(try mode(of: perUser).permissions == 0o700)
            #expect(try mode(of: perUser).owner == geteuid())
            var stores: [FilePath] = []
            for name in try FileManager.default.contentsOfDirectory(atPath: perUser.string) {
                let copy = perUser.appending(name)
                guard (try? mode(of: copy.appending(".lock"))) != nil else { continue }
                #expect(try mode(of: copy).permissions == 0o700, "\(copy)")
                // > The store extracted, or (served from the bundle) the overlay of pages written and its map.
                for name in ["content/StoreContent/persistentStore", "overlay", "map"] {
                    let store = copy.appending(name)
                    if FileManager.default.fileExists(atPath: store.string) {
                        #expect(try mode(of: store).permissions & 0o077 == 0, "\(store)")
                        stores.append(store)
                    }
                }
            }
            #expect(stores.count >= 1)
            if getuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv"), let store = stores.first {
                let attempt = try run("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", "/bin/cat", store.string])
                #expect(attempt.status != 0, "another uid read the working copy: \(attempt.output)")
                #expect(attempt.output.contains("Permission denied"), "\(attempt.output)")
            } else {
                print("another uid: not tried (needs root and setpriv); modes and owner checked instead")
            }
            try await document.close()
        }
    }

    @Test("a working-copies folder that is a symbolic link, or another user's, is refused")
    func unsafeWorkingFolders() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            let elsewhere = folder.appending("elsewhere")
            try FileManager.default.createDirectory(atPath: elsewhere.string, withIntermediateDirectories: true)
            let link = folder.appending("planted")
            try FileManager.default.createSymbolicLink(atPath: link.string, withDestinationPath: elsewhere.string)
            var options = appOptions(folder)
            options.workingDirectory = link
            let linked = await #expect(throws: DocumentError.self) { _ = try await Document.open(at: bundle, options: options) }
            #expect(linked?.code == .cannotCreate)
            #expect(linked?.reason.contains("symbolic link") == true)
            #expect(try FileManager.default.contentsOfDirectory(atPath: elsewhere.string).isEmpty)

            if getuid() == 0 {
                let foreign = folder.appending("foreign")
                try FileManager.default.createDirectory(atPath: foreign.string, withIntermediateDirectories: true)
                #expect(chown(foreign.string, 65534, 65534) == 0)
                options.workingDirectory = foreign
                let other = await #expect(throws: DocumentError.self) { _ = try await Document.open(at: bundle, options: options) }
                #expect(other?.code == .cannotCreate)
                #expect(other?.reason.contains("another user") == true)
            }

        }
    }

    // 5
    @Test("stateChanges yields every transition: edited after a save, normal, closed")
    func stateChangesTellTheTruth() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            let document = try await Document.open(at: bundle, options: appOptions(folder))
            try await document.writer.write { db in try db.execute(sql: "CREATE TABLE note(text)") }
            try await document.save()
            let stream = document.stateChanges
            try await document.writer.write { db in try db.execute(sql: "INSERT INTO note VALUES ('a')") }
            try await document.writer.write { db in try db.execute(sql: "INSERT INTO note VALUES ('b')") }
            try await document.revert()
            try await document.writer.write { db in try db.execute(sql: "INSERT INTO note VALUES ('c')") }
            try await document.close()
            var seen: [Document.State] = []
            for await state in stream { seen.append(state) }
            #expect(seen == [.hasUnsavedChanges, .normal, .hasUnsavedChanges, .normal, .closed])
            let ended = await withTaskGroup(of: Bool.self) { group in
                group.addTask { for await _ in document.stateChanges {}; return true }
                group.addTask { try? await Task.sleep(for: .seconds(5)); return false }
                let first = await group.next() ?? false
                group.cancelAll()  // a stream still open ends on cancellation
                return first
            }
            #expect(ended, "a closed document's stream ends at once")
        }
    }

    // 6
    @Test("a writer and an observation kept across revert() keep working and see the reverted content")
    func writerSurvivesRevert() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            let document = try await Document.open(at: bundle, options: appOptions(folder))
            let writer = try document.writer
            try await writer.write { db in try db.execute(sql: "CREATE TABLE note(text); INSERT INTO note VALUES ('saved')") }
            try await document.save()
            let counts = CountLog()
            let observation = ValueObservation.tracking { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM note") ?? -1 }
            let cancellable = observation.start(in: writer, scheduling: .async(onQueue: DispatchQueue(label: "observation")), onError: { counts.fail($0) },
                                                onChange: { counts.append($0) })
            try await writer.write { db in try db.execute(sql: "INSERT INTO note VALUES ('unsaved'); CREATE TABLE extra(x)") }
            try await document.revert()
            #expect(document.state == .normal)
            let afterRevert = try await writer.read { db in
                (try String.fetchAll(db, sql: "SELECT text FROM note"), try db.tableExists("extra"))
            }
            #expect(afterRevert.0 == ["saved"])
            #expect(afterRevert.1 == false)
            try await writer.write { db in try db.execute(sql: "INSERT INTO note VALUES ('after')") }
            #expect(document.state == .hasUnsavedChanges)
            try await waitUntil { counts.values.last == 2 }
            #expect(counts.values.contains(1), "the observation saw the reverted content: \(counts.values)")
            #expect(counts.values == [1, 2, 1, 2], "\(counts.values)")
            #expect(counts.errors.isEmpty)
            cancellable.cancel()
            try await document.close()
            #expect(try await bundleContent(bundle, folder: folder).tables["note"]?.hasPrefix("2:") == true)
        }
    }

    @Test("revert() on a read-only document reloads the bundle as it is now, into the same reader")
    func readOnlyRevertReloads() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            let writer = try await Document.open(at: bundle, options: appOptions(folder))
            try await writer.writer.write { db in try db.execute(sql: "CREATE TABLE note(text); INSERT INTO note VALUES ('one')") }
            try await writer.save()
            var options = appOptions(folder)
            options.isReadOnly = true
            let document = try await Document.open(at: bundle, options: options)
            let reader = try document.reader
            try await writer.writer.write { db in try db.execute(sql: "INSERT INTO note VALUES ('two'); CREATE TABLE tag(x)") }
            try await writer.close()
            #expect(try await reader.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM note") } == 1)
            try await document.revert()
            #expect(document.state == .editingDisabled)
            let (count, hasTag) = try await reader.read { db in
                (try Int.fetchOne(db, sql: "SELECT count(*) FROM note"), try db.tableExists("tag"))
            }
            #expect(count == 2)
            #expect(hasTag)
            try await document.close()
        }
    }

    // 7
    @Test("another app's document is refused for writing with its own code, and left byte for byte as it was")
    func foreignDocumentsAreLeftAlone() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Recipes.mdz")
            var recipes = appOptions(folder)
            recipes.mediaType = "application/x-recipes"
            var recipesModel = DocumentMigrator(modelName: "Recipes", modelVersion: "9")
            recipesModel.registerMigration("r1") { db in try db.execute(sql: "CREATE TABLE recipe(name)") }
            recipes.migrations = recipesModel
            try await Document.open(at: bundle, options: recipes).close()
            let original = try Data(contentsOf: URL(fileURLWithPath: bundle.string))

            var notes = appOptions(folder)
            notes.migrations = DocumentMigrator(modelName: "Notes", modelVersion: "1")
            notes.mediaType = "application/x-recipes"
            let model = await #expect(throws: DocumentError.self) { _ = try await Document.open(at: bundle, options: notes) }
            #expect(model?.code == .modelMismatch)

            notes.mediaType = "application/x-notes"
            let type = await #expect(throws: DocumentError.self) { _ = try await Document.open(at: bundle, options: notes) }
            #expect(type?.code == .documentTypeMismatch)

            var older = recipes
            var olderModel = DocumentMigrator(modelName: "Recipes", modelVersion: "8")
            olderModel.registerMigration("r1") { db in try db.execute(sql: "CREATE TABLE recipe(name)") }
            older.migrations = olderModel
            let newer = await #expect(throws: DocumentError.self) { _ = try await Document.open(at: bundle, options: older) }
            #expect(newer?.code == .newerModel)
            #expect(try Data(contentsOf: URL(fileURLWithPath: bundle.string)) == original, "refused opens change nothing")

            var readOnly = notes
            readOnly.isReadOnly = true
            let reader = try await Document.open(at: bundle, options: readOnly)
            #expect(reader.metadata.model.name == "Recipes")
            #expect(reader.metadata.model.version == "9")
            try await reader.close()

            // The same app at a later version migrates it, as it should.
            var later = recipes
            var laterModel = DocumentMigrator(modelName: "Recipes", modelVersion: "10")
            laterModel.registerMigration("r1") { db in try db.execute(sql: "CREATE TABLE recipe(name)") }
            laterModel.registerMigration("r2") { db in try db.execute(sql: "ALTER TABLE recipe ADD COLUMN minutes") }
            later.migrations = laterModel
            let upgraded = try await Document.open(at: bundle, options: later)
            #expect(upgraded.appliedMigrations == ["r2"])
            #expect(upgraded.metadata.model.version == "10")
            try await upgraded.close()
        }
    }

    // 8
    @Test("state read inside a write, from another thread, and during a save never touches the database")
    func stateInsideWrite() async throws {
        try await withTemporaryDirectory { folder in
            let document = try await Document.open(at: folder.appending("Notes.mdz"), options: appOptions(folder))
            let seen = try await document.writer.write { db -> [Document.State] in
                let before = document.state
                try db.execute(sql: "CREATE TABLE t(x)")
                return [before, document.state, document.hasUnsavedChanges ? .hasUnsavedChanges : .normal]
            }
            #expect(seen == [.normal, .normal, .normal], "a change counts once committed")
            #expect(document.state == .hasUnsavedChanges)
            try await document.writer.write { db in
                _ = document.metadata
                _ = document.stateChanges
                try db.execute(sql: "INSERT INTO t VALUES (1)")
            }
            try await document.close()
        }
    }

    // 9
    @Test("read-only opens and verify beside a saving app never see damage")
    func readersBesideSaves() async throws {
        let seconds = Double(ProcessInfo.processInfo.environment["DOCUMENT_SOAK_SECONDS"] ?? "") ?? 20
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Busy.mdz")
            let document = try await Document.open(at: bundle, options: appOptions(folder))
            try await document.writer.write { db in
                try db.execute(sql: "CREATE TABLE blob(id INTEGER PRIMARY KEY, data BLOB)")
                var generator = SeededGenerator(seed: 9)
                for _ in 0..<48 {  // ~3 MiB that deflate does not shrink to nothing
                    let bytes = (0..<65536).map { _ in UInt8.random(in: 0...255, using: &generator) }
                    try db.execute(sql: "INSERT INTO blob(data) VALUES (?)", arguments: [Data(bytes)])
                }
            }
            try await document.save()
            let deadline = Date().addingTimeInterval(seconds)
            let saver = Task {
                var saves = 0
                repeat {  // at least once, however loaded the machine
                    let id = saves % 48 + 1
                    try await document.writer.write { db in
                        try db.execute(sql: "UPDATE blob SET data = randomblob(65536) WHERE id = ?", arguments: [id])
                    }
                    try await document.save()
                    saves += 1
                } while Date() < deadline
                return saves
            }
            let failures = FailureLog()
            async let opens: Int = readLoop(until: deadline, failures: failures) {
                var options = appOptions(folder)
                options.isReadOnly = true
                let reader = try await Document.open(at: bundle, options: options)
                let count = try await reader.reader.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM blob") }
                try await reader.close()
                if count != 48 { failures.append("a read-only open saw \(count ?? -1) rows") }
            }
            async let verifies: Int = readLoop(until: deadline, failures: failures) {
                _ = try BundleReader(at: bundle).verify(full: false, workingDirectory: folder)
            }
            let (saves, opened, verified) = try await (saver.value, opens, verifies)
            #expect(failures.messages.isEmpty, "\(failures.messages.count) failures, first: \(failures.messages.first ?? "")")
            #expect(saves > 0 && opened > 0 && verified > 0)
            print("beside \(saves) saves: \(opened) read-only opens and \(verified) verifies, \(failures.messages.count) failures")
            try await document.close()
        }
    }

    @Test("smaller promises: a useful localizedDescription, symbolic links resolved, a killed save's leftover removed")
    func smallerPromises() async throws {
        try await withTemporaryDirectory { folder in
            let missing = await #expect(throws: DocumentError.self) {
                var options = appOptions(folder)
                options.createIfMissing = false
                _ = try await Document.open(at: folder.appending("Missing.mdz"), options: options)
            }
            let described = (missing as (any Error)?)?.localizedDescription ?? ""
            #expect(described.contains("Missing.mdz") && described.contains("no such document"), "\(described)")

            let bundle = folder.appending("Real.mdz")
            try await Document.open(at: bundle, options: appOptions(folder)).close()
            let link = folder.appending("Link.mdz")
            try FileManager.default.createSymbolicLink(atPath: link.string, withDestinationPath: "Real.mdz")
            // A leftover of a save killed mid-write: an aside file nobody holds.
            let leftover = folder.appending(".Real.mdz.deadbeef.partial")
            #expect(FileManager.default.createFile(atPath: leftover.string, contents: Data(repeating: 1, count: 100)))
            let document = try await Document.open(at: link, options: appOptions(folder))
            #expect(!FileManager.default.fileExists(atPath: leftover.string), "the killed save's aside file is gone")
            try await document.writer.write { db in try db.execute(sql: "CREATE TABLE t(x)") }
            try await document.close()
            #expect(try mode(of: link).isLink, "the link is still a link")
            #expect(try await bundleContent(bundle, folder: folder).tables["t"] != nil, "the target was saved")

            var readOnly = appOptions(folder)
            readOnly.isReadOnly = true
            let reader = try await Document.open(at: link, options: readOnly)
            let saveError = await #expect(throws: DocumentError.self) { try await reader.save() }
            #expect(saveError?.code == .readOnly)
            try await reader.close()
        }
    }
}

/// Runs `body` at least once and again until `deadline`, recording failures; returns how many runs succeeded.
private func readLoop(until deadline: Date, failures: FailureLog, _ body: @Sendable () async throws -> Void) async -> Int {
    var count = 0
    repeat {
        do {
            try await body()
            count += 1
        } catch {
            failures.append("\(error)")
        }
    } while Date() < deadline
    return count
}

final class FailureLog: Sendable {
    private let stored = Mutex<[String]>([])
    func append(_ message: String) { stored.withLock { $0.append(message) } }
    var messages: [String] { stored.withLock { $0 } }
}

final class CountLog: Sendable {
    private let stored = Mutex<(values: [Int], errors: [String])>(([], []))
    func append(_ value: Int) { stored.withLock { $0.values.append(value) } }
    func fail(_ error: any Error) { stored.withLock { $0.errors.append("\(error)") } }
    var values: [Int] { stored.withLock { $0.values } }
    var errors: [String] { stored.withLock { $0.errors } }
}

/// Waits up to 10 s for `condition`.
func waitUntil(_ condition: () -> Bool) async throws {
    let deadline = Date().addingTimeInterval(10)
    while !condition() && Date() < deadline { try await Task.sleep(nanoseconds: 10_000_000) }
}

