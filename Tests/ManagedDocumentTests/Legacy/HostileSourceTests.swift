import Foundation
import GRDB
import LegacySamples
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

@Suite("Sources that are not stores, damaged or busy get their own outcome and stay byte-identical")
struct HostileSourceTests {
    private func converter(timeout: Double = 5) -> LegacyConverter {
        var options = ConversionOptions()
        options.legacyPolicy = .delete  // the harshest policy: it must still touch nothing on failure
        options.busyTimeout = timeout
        return LegacyConverter(options: options)
    }

    @Test("pretend, empty, short and sidecar-only files are not legacy stores", arguments: [
        ("notes.sqlite", Array("just some notes, not a database\n".utf8)),
        ("empty.sqlite", []),
        ("short.db", Array("SQLite format 3\u{0}".utf8) + [0, 1, 2]),
        ("orphan.sqlite-wal", [0x37, 0x7f, 0x06, 0x82] + [UInt8](repeating: 0, count: 28)),
    ])
    func notStores(name: String, bytes: [UInt8]) async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appending(name)
            try Fixtures.write(bytes, to: path)
            let error = #expect(throws: DocumentError.self) { try converter().convert(storeAt: path) }
            #expect(error?.code == .notALegacyStore)
            #expect(error?.path == path)
            #expect(try Fixtures.bytes(of: path) == bytes)
            #expect(try FileSystem.contentsOfDirectory(directory) == [name])
        }
    }

    @Test("a truncated store fails as damaged and is left exactly as it was")
    func truncatedStore() async throws {
        try await withTemporaryDirectory { directory in
            try LegacySamples.makeTasteStore(in: directory)
            let path = directory.appending("TasteB.sqlite")
            var bytes = try Fixtures.bytes(of: path)
            bytes = Array(bytes[0..<(bytes.count / 2)])
            try Fixtures.write(bytes, to: path)
            let error = #expect(throws: DocumentError.self) { try converter().convert(storeAt: path) }
            #expect(error?.code == .storeCorrupt)
            #expect(error?.description.contains("left exactly as it was") == true)
            #expect(try Fixtures.bytes(of: path) == bytes)
            #expect(try FileSystem.contentsOfDirectory(directory) == ["TasteB.sqlite"])
        }
    }

    @Test("a store with garbage pages fails integrity_check and is left as it was")
    func corruptPages() async throws {
        try await withTemporaryDirectory { directory in
            try LegacySamples.makeTasteStore(in: directory)
            let path = directory.appending("TasteB.sqlite")
            // Break the b-tree page header of a table's root page: the page type byte becomes invalid.
            let root = try DatabaseQueue(path: path.string).read { db in
                try Int.fetchOne(db, sql: "SELECT rootpage FROM sqlite_master WHERE name = 'ZDISH'") ?? 0
            }
            var bytes = try Fixtures.bytes(of: path)
            #expect(root > 1)
            for index in (root - 1) * 4096..<(root - 1) * 4096 + 12 { bytes[index] = 0xFF }
            try Fixtures.write(bytes, to: path)
            let error = #expect(throws: DocumentError.self) { try converter().convert(storeAt: path) }
            #expect(error?.code == .storeCorrupt)
            #expect(try Fixtures.bytes(of: path) == bytes)
            #expect(try FileSystem.contentsOfDirectory(directory) == ["TasteB.sqlite"])
        }
    }

    @Test("a large store whose index lost rows fails integrity_check while its bundle is written; nothing lands")
    func largeStoreFailsCheckInBackground() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appending("Large.sqlite")
            try Fixtures.makeStore(at: path, rows: 16_000, blobSize: 300)
            // Rows leave the table while SQLite does not know the index exists, so the index keeps their entries:
            // row counts read the same before and after recovery, and only integrity_check can tell.
            let queue = try DatabaseQueue(path: path.string)
            let saved = try queue.writeWithoutTransaction { db in
                let row = try Row.fetchOne(db, sql: "SELECT type, name, tbl_name, rootpage, sql FROM sqlite_master WHERE name = 'note_title'")
                try db.execute(sql: """
                    PRAGMA writable_schema = ON;
                    DELETE FROM sqlite_master WHERE name = 'note_title';
                    PRAGMA writable_schema = OFF;
                    """)
                return try #require(row)
            }
            try queue.close()
            let second = try DatabaseQueue(path: path.string)
            try second.writeWithoutTransaction { db in
                try db.execute(sql: "PRAGMA foreign_keys = OFF; DELETE FROM note WHERE id % 97 = 0")
                try db.execute(sql: "PRAGMA writable_schema = ON")
                try db.execute(sql: "INSERT INTO sqlite_master VALUES (?, ?, ?, ?, ?)",
                               arguments: [saved[0] as String, saved[1] as String, saved[2] as String,
                                           saved[3] as Int, saved[4] as String])
                try db.execute(sql: "PRAGMA writable_schema = OFF")
            }
            try second.close()
            let size = try #require(try FileSystem.status(path)).size
            #expect(size >= LegacyConverter.backgroundCheckThreshold, "the check must run beside the writer")
            let before = try Fixtures.fileHashes(directory)

            let error = #expect(throws: DocumentError.self) { try converter().convert(storeAt: path) }
            #expect(error?.code == .storeCorrupt, "\(String(describing: error))")
            #expect(error?.description.contains("integrity check") == true, "\(String(describing: error))")
            #expect(try Fixtures.fileHashes(directory) == before, "no bundle, no temporary, the source as it was")
        }
    }

    @Test("a store another process is writing is reported busy after the timeout, and not touched", arguments: [
        "DELETE", "WAL",
    ])
    func busyStore(journalMode: String) async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appending("Busy.sqlite")
            try Fixtures.makeStore(at: path, rows: 50)
            // Another process: in rollback mode it holds an exclusive lock mid-transaction; in WAL mode it has
            // the store open with an uncommitted write.
            let script = """
                import sqlite3, sys, time
                db = sqlite3.connect(sys.argv[1], isolation_level=None)
                db.execute("PRAGMA journal_mode=\(journalMode)")
                db.execute("BEGIN EXCLUSIVE")
                db.execute("INSERT INTO note(title) VALUES ('in flight')")
                print("locked", flush=True)
                time.sleep(30)
                """
            let python = try PythonProcess(script, [path.string])
            defer { python.kill() }
            _ = python.readLine()  // "locked"
            let before = try Fixtures.fileHashes(directory)
            let started = Date()
            let error = #expect(throws: DocumentError.self) { try converter(timeout: 0.5).convert(storeAt: path) }
            #expect(error?.code == .storeBusy)
            #expect(Date().timeIntervalSince(started) >= 0.5)
            #expect(try Fixtures.fileHashes(directory) == before)
            #expect(!(try FileSystem.contentsOfDirectory(directory).contains("Busy.mdz")))
        }
    }

    @Test("a WAL store whose app closes while the conversion waits (its -wal and -shm deleted) converts once closed")
    func appClosesWhileWaiting() async throws {
        try await withTemporaryDirectory { directory in
            let path = try Fixtures.makeStore(at: directory.appending("Closing.sqlite"), rows: 30)
            let script = """
                import sqlite3, sys, time
                db = sqlite3.connect(sys.argv[1], isolation_level=None)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("INSERT INTO note(title) VALUES ('written by the app')")
                print("open", flush=True)
                time.sleep(0.8)
                db.close()
                """
            let python = try PythonProcess(script, [path.string])
            defer { python.process.waitUntilExit() }
            _ = python.readLine()  // "open": the -wal and -shm exist now
            #expect(FileSystem.isRegularFile(FilePath(path.string + "-shm")))
            var options = ConversionOptions()
            options.legacyPolicy = .keep
            options.busyTimeout = 10
            let report = try LegacyConverter(options: options).convert(storeAt: path)
            #expect(report.outcome == .converted)
            #expect(!FileSystem.isRegularFile(FilePath(path.string + "-wal")), "the app closed and SQLite deleted it")
            let digests = try Fixtures.bundleDigests(directory.appending("Closing.mdz"))
            #expect(digests == (try Fixtures.digestsAsSQLiteReads(path)), "the app's last row is in the bundle")
            #expect(report.rowCounts["note"] == 31)
        }
    }

    @Test("a bundle and a sidecar passed as sources are refused with a hint")
    func bundlesAndSidecars() async throws {
        try await withTemporaryDirectory { directory in
            try LegacySamples.makeTimeStore(in: directory)
            let sidecar = directory.appending("minimalTime.sqlite-wal")
            let error = #expect(throws: DocumentError.self) { try converter().convert(storeAt: sidecar) }
            #expect(error?.code == .notALegacyStore)
            #expect(error?.reason.contains("minimalTime.sqlite") == true)
            let bundle = directory.appending("Doc.mdz")
            try Fixtures.makeBundle(at: bundle)
            let bundleError = #expect(throws: DocumentError.self) { try converter().convert(storeAt: bundle) }
            #expect(bundleError?.code == .notALegacyStore)
        }
    }

    @Test("an unwritable destination folder fails cleanly and the source is untouched")
    func unwritableDestination() async throws {
        try await withTemporaryDirectory { directory in
            try LegacySamples.makeTasteStore(in: directory)
            let source = directory.appending("TasteB.sqlite")
            let before = try Fixtures.fileHashes(directory)
            // A destination whose folder is a file: nothing can be created there, whatever the user's rights.
            try Fixtures.write([1], to: directory.appending("blocked"))
            let error = #expect(throws: DocumentError.self) {
                try converter().convert(storeAt: source, to: directory.appending("blocked/TasteB.mdz"))
            }
            #expect(error?.code == .cannotCreate)
            var after = try Fixtures.fileHashes(directory)
            after.removeValue(forKey: "blocked")
            #expect(after == before)
        }
    }
}
