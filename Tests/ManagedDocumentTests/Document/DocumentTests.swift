import Foundation
import GRDB
import LegacySamples
import Synchronization
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

@Suite("Documents open, save, revert and close like UIManagedDocument, without its pitfalls")
struct DocumentTests {
    private func options(_ directory: FilePath) -> Document.OpenOptions {
        var options = Document.OpenOptions()
        options.createIfMissing = true
        options.workingDirectory = directory.appending("working")
        return options
    }

    @Test("create, write, save, close, reopen: the content is identical")
    func saveAndReopen() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appending("Notes.mdz")
            let document = try await Document.open(at: path, options: options(directory))
            #expect(document.state == .normal)
            try await document.writer.write { db in
                try db.execute(sql: "CREATE TABLE note(id INTEGER PRIMARY KEY, text TEXT, payload BLOB)")
                for index in 0..<500 {
                    try db.execute(sql: "INSERT INTO note(text, payload) VALUES (?, ?)",
                                   arguments: ["note \(index)", index % 3 == 0 ? nil : Data(repeating: UInt8(index % 256), count: 100)])
                }
            }
            #expect(document.state == .hasUnsavedChanges)
            try await document.save()
            #expect(document.state == .normal)
            let saved = try Fixtures.bundleDigests(path)
            try await document.close()
            #expect(document.state == .closed)
            #expect(try FileSystem.contentsOfDirectory(directory.appending("working")).isEmpty)

            let reopened = try await Document.open(at: path, options: options(directory))
            let digests = try Fixtures.rowDigests(of: reopened.workingCopyStoreForTests)
            #expect(digests == saved)
            #expect(digests["note"]?.hasPrefix("500:") == true)
            #expect(reopened.metadata.modifiedAt >= reopened.metadata.createdAt)
            try await reopened.close()
        }
    }

    @Test("revert drops unsaved changes")
    func revert() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appending("Notes.mdz")
            let document = try await Document.open(at: path, options: options(directory))
            try await document.writer.write { db in try db.execute(sql: "CREATE TABLE t(x); INSERT INTO t VALUES (1)") }
            try await document.save()
            try await document.writer.write { db in try db.execute(sql: "INSERT INTO t VALUES (2); CREATE TABLE u(y)") }
            #expect(document.hasUnsavedChanges)
            try await document.revert()
            #expect(document.state == .normal)
            let (count, hasU) = try await document.reader.read { db in
                (try Int.fetchOne(db, sql: "SELECT count(*) FROM t") ?? -1, try db.tableExists("u"))
            }
            #expect(count == 1)
            #expect(!hasU)
            try await document.close(savingChanges: false)
        }
    }

    @Test("a read-only open cannot write and leaves the bundle byte-identical; it takes no lock")
    func readOnly() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appending("Notes.mdz")
            try Fixtures.makeBundle(at: path, rows: 30)
            let before = try Fixtures.bytes(of: path)
            let writer = try await Document.open(at: path, options: options(directory))
            var readOnly = options(directory)
            readOnly.isReadOnly = true
            let reader = try await Document.open(at: path, options: readOnly)
            #expect(reader.state == .editingDisabled)
            let error = await #expect(throws: DocumentError.self) {
                try await reader.writer.write { db in try db.execute(sql: "DELETE FROM note") }
            }
            #expect(error?.code == .readOnly)
            let saveError = await #expect(throws: DocumentError.self) { try await reader.save() }
            #expect(saveError?.code == .readOnly)
            #expect(try await reader.reader.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM note") } == 30)
            try await reader.close()
            try await writer.close(savingChanges: false)
            #expect(try Fixtures.bytes(of: path) == before)
        }
    }

    @Test("metadata can be read without extracting anything")
    func metadataOnly() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appending("Notes.mdz")
            let written = try Fixtures.makeBundle(at: path, rows: 30)
            #expect(try Document.metadata(at: path).documentID == written.documentID)
        }
    }

    @Test("a second writer in the same process is refused, or gets in after the first closes when it waits")
    func oneWriterInProcess() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appending("Notes.mdz")
            let first = try await Document.open(at: path, options: options(directory))
            let error = await #expect(throws: DocumentError.self) {
                _ = try await Document.open(at: path, options: options(directory))
            }
            #expect(error?.code == .inUse)
            var waiting = options(directory)
            waiting.lockTimeout = 60  // a loaded machine may take seconds to close the first
            async let second = Document.open(at: path, options: waiting)
            try await Task.sleep(nanoseconds: 200_000_000)
            try await first.close()
            let document = try await second
            #expect(document.state == .normal)
            try await document.close()
        }
    }

    @Test("the not-found, in-use and too-new errors say what to do")
    func notFound() async throws {
        try await withTemporaryDirectory { directory in
            var options = options(directory)
            options.createIfMissing = false
            let error = await #expect(throws: DocumentError.self) {
                _ = try await Document.open(at: directory.appending("Missing.mdz"), options: options)
            }
            #expect(error?.code == .notFound)
        }
    }

    @Test("the Documents article's example runs as written: migrations, a legacy store first, save, reopen")
    func articleExample() async throws {
        struct Note: Codable, FetchableRecord, PersistableRecord {
            var id: Int64?
            var text: String
        }
        try await withTemporaryDirectory { directory in
            let old = directory.appending("old")
            try FileManager.default.createDirectory(atPath: old.string, withIntermediateDirectories: true)
            let legacy = old.appending(try LegacySamples.makeTimeStore(in: old).source)
            let expected = try Fixtures.digestsAsSQLiteReads(legacy)

            var migrator = DocumentMigrator(modelName: "Notes", modelVersion: "1")
            migrator.registerAdditiveSchema("v1", [
                .table("note", primaryKey: "id", columns: [.init("text", "TEXT NOT NULL", default: "''")]),
            ])
            var options = self.options(directory)
            options.legacyStoreLocations = [legacy]
            options.lockTimeout = 5
            options.recovery = .recover
            options.migrations = migrator

            let bundle = directory.appending("Notes.mdz")
            let document = try await Document.open(at: bundle, options: options)
            let report = try #require(document.conversionReport)
            #expect(report.backupLocation != nil)
            #expect(document.appliedMigrations == ["v1"])
            try await document.writer.write { db in try Note(id: nil, text: "Buy bread").insert(db) }
            #expect(document.state == .hasUnsavedChanges)
            try await document.save()
            #expect(try await document.reader.read { db in try Note.fetchCount(db) } == 1)
            try await document.close()

            let reopened = try await Document.open(at: bundle, options: options)
            #expect(reopened.appliedMigrations.isEmpty, "migrations run once")
            #expect(reopened.conversionReport == nil)
            #expect(reopened.metadata.model.migrations.map(\.identifier) == ["v1"])
            var digests = try Fixtures.rowDigests(of: reopened.workingCopyStoreForTests)
            for table in ["note", "managed_document_migrations", "managed_document_model"] {
                digests.removeValue(forKey: table)
            }
            #expect(digests == expected, "the legacy rows are all there")
            try await reopened.close()
        }
    }

    @Test("state changes are published as they happen")
    func stateChanges() async throws {
        try await withTemporaryDirectory { directory in
            let document = try await Document.open(at: directory.appending("Notes.mdz"), options: options(directory))
            let stream = document.stateChanges
            try await document.writer.write { db in try db.execute(sql: "CREATE TABLE t(x)") }
            try await document.save()
            try await document.close()
            var seen: [Document.State] = []
            for await state in stream { seen.append(state) }
            #expect(seen == [.hasUnsavedChanges, .normal, .closed])
        }
    }

    @Test("stale working copies are removed; one in use is kept")
    func staleWorkingCopies() async throws {
        try await withTemporaryDirectory { directory in
            let root = directory.appending("working")
            let stale = root.appending("0123456789abcdef")
            try FileSystem.createDirectory(stale.appending("content"))
            try Fixtures.write([], to: stale.appending(".lock"))
            #expect(utimes(stale.string, nil) == 0)
            // A removal cut short by a crash: content left, the lock file (removed last) already gone.
            let cutShort = root.appending("fedcba9876543210")
            try FileSystem.createDirectory(cutShort.appending("content"))
            try Fixtures.write([1, 2, 3], to: cutShort.appending("content").appending("left"))
            let document = try await Document.open(at: directory.appending("Notes.mdz"), options: options(directory))
            let removed = try Document.removeStaleWorkingCopies(in: root, olderThan: -1)
            #expect(Set(removed) == [stale, cutShort])
            #expect(try FileSystem.contentsOfDirectory(root).count == 1, "the open document's copy stays")
            try await document.close()
        }
    }
}

extension Document {
    /// The working copy's store, for tests that compare it with the bundle: the extracted store, or the store an
    /// overlay composes written out beside it (a writable document served from its bundle has no store file).
    var workingCopyStoreForTests: FilePath {
        get throws {
            guard let overlay = try (store as? OverlayWorkingStore)?.overlay() else { return workingCopy.store }
            let composed = workingCopy.directory.appending("composed-for-tests")
            try Fixtures.write(try overlay.bytes(at: 0, count: Int(overlay.logicalSize)), to: composed)
            return composed
        }
    }
}
