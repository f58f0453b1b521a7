import Foundation
import GRDB
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

@Suite("Legacy files are disposed of only under an exclusive lock, and only when nothing was committed since")
struct DisposalLockTests {
    private func legacy(_ path: FilePath) throws -> LegacyStore {
        guard case .legacyStore(let legacy) = try LegacyDetector.detect(at: path) else {
            Issue.record("\(path) is not detected as a store")
            throw CancellationError()
        }
        return legacy
    }

    @Test("a commit after the state was taken is caught, in rollback and in WAL mode", arguments: ["DELETE", "WAL"])
    func commitAfterStamps(journalMode: String) async throws {
        try await withTemporaryDirectory { directory in
            let path = try Fixtures.makeStore(at: directory.appending("Live.sqlite"), rows: 40)
            let queue = try DatabaseQueue(path: path.string)
            _ = try queue.writeWithoutTransaction { try String.fetchOne($0, sql: "PRAGMA journal_mode = \(journalMode)") }
            try queue.write { try $0.execute(sql: "INSERT INTO note(title) VALUES ('before')") }
            let stamps = try SourceSnapshot.stamps(of: try legacy(path))
            // One more row, and the connection closes: SQLite writes it into the main file.
            try queue.write { try $0.execute(sql: "INSERT INTO note(title) VALUES ('after')") }
            try queue.close()
            let error = #expect(throws: DocumentError.self) {
                try SourceSnapshot.lockForDisposal(of: try legacy(path), unchangedSince: stamps, busyTimeout: 0.2)
            }
            #expect(error?.code == .storeBusy)
            #expect(error?.reason.contains("was written to") == true, "\(String(describing: error))")
        }
    }

    @Test("a commit that lives only in the -wal (its app died before a checkpoint) is caught")
    func commitOnlyInTheWAL() async throws {
        try await withTemporaryDirectory { directory in
            let path = try Fixtures.makeStore(at: directory.appending("Crashed.sqlite"), rows: 40)
            // An app that commits in WAL mode and dies: the -wal keeps the commit, the main file does not have it.
            func commitAndDie(_ title: String) throws {
                let script = """
                    import os, signal, sqlite3, sys
                    db = sqlite3.connect(sys.argv[1], isolation_level=None)
                    db.execute("PRAGMA journal_mode=WAL")
                    db.execute("PRAGMA wal_autocheckpoint=0")
                    db.execute("INSERT INTO note(title) VALUES (?)", (sys.argv[2],))
                    os.kill(os.getpid(), signal.SIGKILL)
                    """
                try Python.execute(script, [path.string, title])  // killed by itself: its status says nothing
            }
            try commitAndDie("first")
            let mainBefore = try Fixtures.bytes(of: path)
            let stamps = try SourceSnapshot.stamps(of: try legacy(path))
            try commitAndDie("second")
            #expect(try Fixtures.bytes(of: path) == mainBefore, "the main file did not change")
            let error = #expect(throws: DocumentError.self) {
                try SourceSnapshot.lockForDisposal(of: try legacy(path), unchangedSince: stamps, busyTimeout: 0.2)
            }
            #expect(error?.code == .storeBusy)
            #expect(error?.reason.contains("Crashed.sqlite-wal changed") == true, "\(String(describing: error))")
        }
    }

    @Test("a reader in another process keeps the files where they are", arguments: ["DELETE", "WAL"])
    func readerInAnotherProcess(journalMode: String) async throws {
        try await withTemporaryDirectory { directory in
            let path = try Fixtures.makeStore(at: directory.appending("Shared.sqlite"), rows: 20)
            let script = """
                import sqlite3, sys, time
                db = sqlite3.connect(sys.argv[1], isolation_level=None)
                db.execute("PRAGMA journal_mode=\(journalMode)")
                db.execute("BEGIN")
                db.execute("SELECT count(*) FROM note").fetchall()
                print("reading", flush=True)
                time.sleep(30)
                """
            let python = try PythonProcess(script, [path.string])
            defer { python.kill() }
            _ = python.readLine()  // "reading"
            let stamps = try SourceSnapshot.stamps(of: try legacy(path))
            let started = Date()
            let error = #expect(throws: DocumentError.self) {
                let hold = try SourceSnapshot.lockForDisposal(of: try legacy(path), unchangedSince: stamps,
                                                              busyTimeout: 0.3)
                try hold?.close()
            }
            #expect(error?.code == .storeBusy)
            #expect(error?.reason.contains("open") == true, "\(String(describing: error))")
            #expect(Date().timeIntervalSince(started) >= 0.3, "waited for the reader before giving up")
        }
    }

    @Test("while the files are disposed of, no connection can read or write the store")
    func theLockKeepsConnectionsOut() async throws {
        try await withTemporaryDirectory { directory in
            let path = try Fixtures.makeStore(at: directory.appending("Held.sqlite"), rows: 20)
            let stamps = try SourceSnapshot.stamps(of: try legacy(path))
            let hold = try SourceSnapshot.lockForDisposal(of: try legacy(path), unchangedSince: stamps, busyTimeout: 1)
            #expect(hold != nil)
            var configuration = Configuration()
            configuration.busyMode = .immediateError
            #expect(throws: DatabaseError.self) {
                let other = try DatabaseQueue(path: path.string, configuration: configuration)
                defer { try? other.close() }  // Squash close error of a connection that could not read.
                _ = try other.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM note") }
            }
            try hold?.close()
            let other = try DatabaseQueue(path: path.string, configuration: configuration)
            #expect(try other.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM note") } == 20)
            try other.close()
        }
    }

    @Test("a conversion whose source is changed before disposal removes its bundle and moves nothing")
    func changedBeforeDisposal() async throws {
        try await withTemporaryDirectory { directory in
            let path = try Fixtures.makeStore(at: directory.appending("Moving.sqlite"), rows: 30)
            let stamps = try SourceSnapshot.stamps(of: try legacy(path))
            let queue = try DatabaseQueue(path: path.string)
            try queue.write { try $0.execute(sql: "DELETE FROM note WHERE rowid % 2 = 0") }
            try queue.close()
            let before = try Fixtures.fileHashes(directory)
            var options = ConversionOptions()
            options.legacyPolicy = .delete
            options.busyTimeout = 0.2
            let converter = LegacyConverter(options: options)
            let provenance = DocumentMetadata.Provenance(kind: "sqlite", fileName: "Moving.sqlite", size: 0, files: [],
                                                         convertedAt: Date())
            let error = #expect(throws: DocumentError.self) {
                try converter.dispose(try legacy(path), provenance: provenance, unchangedSince: stamps)
            }
            #expect(error?.code == .storeBusy)
            #expect(try Fixtures.fileHashes(directory) == before, "nothing deleted")
        }
    }
}
