import Foundation
import GRDB
import ManagedDocument
import Synchronization
import SystemPackage
import TestSupport
import Testing

/// What an app loses around its bundles rather than inside them: a FIFO that would hang an open, bundles a batch
/// wrote in hidden folders that a later search misses, migrations refused for an app's own media type, messages in
/// Swift's words rather than the format's.
@Suite("nothing lost outside the bundle, from an app")
struct NothingLostOutsideTests {
    @Test("opening a FIFO named like a bundle returns at once: not a regular file")
    func fifo() async throws {
        try await withTemporaryDirectory { folder in
            let fifo = folder.appending("x.mdz")
            #expect(mkfifo(fifo.string, 0o600) == 0)
            // > Before the fix the open blocked for a writer that never comes. A watchdog unblocks it after a minute
            // > (a writer end opened, then closed), so that the suite ends, and says so: the test then fails.
            let opening = Task {
                var options = appOptions(folder)
                options.createIfMissing = false
                return try await Document.open(at: fifo, options: options)
            }
            let unblocked = Mutex(false)
            let watchdog = Task {
                try await Task.sleep(nanoseconds: 60_000_000_000)
                unblocked.withLock { $0 = true }
                let writer = open(fifo.string, O_WRONLY | O_NONBLOCK)
                if writer >= 0 { close(writer) }
            }
            let error = await #expect(throws: DocumentError.self) { _ = try await opening.value }
            watchdog.cancel()
            #expect(!unblocked.withLock { $0 }, "the open waited for a writer")
            #expect(error?.code == .notADocument)
            #expect(error?.description.contains("is not a regular file") == true, "\(String(describing: error))")
            let metadata = #expect(throws: DocumentError.self) { _ = try Document.metadata(at: fifo) }
            #expect(metadata?.code == .notADocument)
        }
    }

    @Test("Document.bundles finds every bundle a batch wrote, hidden folders included")
    func hiddenFolders() async throws {
        try await withTemporaryDirectory { folder in
            let stores = ["a/Notes.sqlite", ".hidden/h.sqlite", ".local/share/notes/n.sqlite", "b/.cache/c.sqlite"]
            for store in stores { try Fixtures.makeListStore(at: folder.appending(store), rows: 2) }
            var options = BatchOptions()
            options.conversion.legacyPolicy = .keep
            options.jobs = 1
            let items = Mutex<[BatchItem]>([])
            let summary = try await BatchConverter(root: folder, options: options).run { item in
                items.withLock { $0.append(item) }
            }
            #expect(summary.count(.converted) == stores.count, "\(items.withLock { $0 })")
            let written = Set(items.withLock { $0 }.compactMap(\.bundle).map { folder.appending($0).string })
            let found = Set(try Document.bundles(under: folder).map(\.string))
            #expect(written.count == stores.count)
            #expect(found == written)
        }
    }

    @Test("a batch with an app's media type and migrations migrates every bundle it converts")
    func batchMigrationsWithMediaType() async throws {
        try await withTemporaryDirectory { folder in
            let tree = folder.appending("tree")
            try Fixtures.makeListStore(at: tree.appending("one/Notes.sqlite"), rows: 3)
            try Fixtures.makeListStore(at: tree.appending("two/Diary.sqlite"), rows: 2)
            let migrations = folder.appending("migrations")
            try FileManager.default.createDirectory(atPath: migrations.string, withIntermediateDirectories: true)
            try "CREATE TABLE tag(name TEXT);".write(toFile: migrations.appending("V1__tags.sql").string,
                                                     atomically: true, encoding: .utf8)
            var options = BatchOptions()
            options.conversion.legacyPolicy = .keep
            options.conversion.mediaType = "application/vnd.example.notes+zip"
            options.migrations = try SQLMigrationFolder(directory: migrations)
            options.jobs = 1
            let items = Mutex<[BatchItem]>([])
            let summary = try await BatchConverter(root: tree, options: options).run { item in
                items.withLock { $0.append(item) }
            }
            let all = items.withLock { $0 }
            #expect(summary.count(.converted) == 2, "\(all.map { "\($0.source): \($0.outcome) \($0.error?.message ?? "")" })")
            #expect(summary.count(.failed) == 0)
            for item in all {
                #expect(item.migrationsApplied == ["V1__tags"], "\(item.source): \(item.error?.message ?? "")")
                let bundle = tree.appending(try #require(item.bundle))
                let metadata = try Document.metadata(at: bundle)
                #expect(metadata.mediaType == "application/vnd.example.notes+zip")
                #expect(metadata.model.migrations.map(\.identifier) == ["V1__tags"])
            }
        }
    }

    @Test("SQLMigrationFolder.apply migrates a bundle of any media type once, and says when it is up to date")
    func applyFolder() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            var options = appOptions(folder)
            options.mediaType = "application/vnd.example.notes+zip"
            let document = try await Document.open(at: bundle, options: options)
            try await document.close()
            let migrations = folder.appending("migrations")
            try FileManager.default.createDirectory(atPath: migrations.string, withIntermediateDirectories: true)
            try "CREATE TABLE tag(name TEXT);".write(toFile: migrations.appending("V1__tags.sql").string,
                                                     atomically: true, encoding: .utf8)
            let sql = try SQLMigrationFolder(directory: migrations)
            #expect(try await sql.apply(to: bundle) == ["V1__tags"])
            #expect(try await sql.apply(to: bundle) == [])
            #expect(try Document.metadata(at: bundle).mediaType == "application/vnd.example.notes+zip")
        }
    }

    @Test("metadata of the wrong kind is named in the format's words, in localizedDescription too",
          arguments: [
            ("formatVersion", "\"2\"", "formatVersion must be a whole number, found a string"),
            ("documentID", "5", "documentID must be a string, found a number"),
            ("model.name", "7", "model.name must be a string, found a number"),
          ])
    func metadataKinds(_ key: String, _ value: String, _ expected: String) async throws {
        try await withTemporaryDirectory { folder in
            let good = folder.appending("Good.mdz")
            let document = try await Document.open(at: good, options: appOptions(folder))
            try await document.close()
            let bad = folder.appending("Bad.mdz")
            try Python.rewritingMetadata(of: good.string, to: bad.string, [(key, value)])
            let error = #expect(throws: DocumentError.self) { _ = try Document.metadata(at: bad) }
            #expect(error?.code == .invalidMetadata)
            let line = "\(bad): DocumentMetadata.json: \(expected)"
            #expect(error?.description == line, "\(String(describing: error))")
            #expect(error?.localizedDescription == line)
            #expect(error?.description.contains("decode") == false)
        }
    }
}
