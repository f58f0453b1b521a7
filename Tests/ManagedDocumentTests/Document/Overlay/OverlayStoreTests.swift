import Foundation
import GRDB
import Synchronization
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

/// ``OverlayStore`` through ``OverlayVFS``: a writable working copy made of its base bundle and a private overlay
/// (FORMAT.md 16.2).
@Suite("Writable working copies: the base bundle and a private overlay of the pages written")
struct OverlayStoreTests {
    /// The same changes applied to the working copy and to a plain store file.
    static func change(_ queues: [DatabaseQueue], round: Int) throws {
        for queue in queues {
            try queue.write { db in
                for index in 0..<40 {
                    try db.execute(sql: "INSERT INTO blob(payload, text) VALUES (?, ?)",
                                   arguments: [Data(repeating: UInt8(index), count: 300 + index), "new \(round) \(index)"])
                }
                try db.execute(sql: "UPDATE blob SET text = text || ? WHERE id % 97 = ?", arguments: ["u\(round)", round])
                try db.execute(sql: "DELETE FROM blob WHERE id BETWEEN ? AND ?", arguments: [round * 500, round * 500 + 40])
                try db.execute(sql: "CREATE TABLE IF NOT EXISTS extra(id INTEGER PRIMARY KEY, note TEXT)")
                try db.execute(sql: "INSERT INTO extra(note) VALUES (?)", arguments: ["round \(round)"])
            }
        }
    }

    @Test("changes are committed to the overlay, read back after a reopen, and the rest is served by the base")
    func roundTrip() async throws {
        try await withTemporaryDirectory { directory in
            let fixture = try OverlayFixture(in: directory, bytes: 4_600_000)
            let storeSize = try Stat(fixture.loose, followTargetSymlink: false).size
            #expect(storeSize >= 4 << 20)
            let model = try fixture.model(at: directory.appending("model.sqlite"))
            var connection = try OverlayConnection(fixture.create("wc", in: directory))
            #expect(try connection.digests() == OverlayFiles.digests(model), "before any change")
            for round in 1...3 { try Self.change([connection.queue, model], round: round) }
            let expected = try OverlayFiles.digests(model)
            #expect(try connection.digests() == expected)
            // > A second connection to the same working copy is refused while the first holds it.
            #expect(throws: (any Error).self) { _ = try DatabaseQueue(path: connection.registration.uri) }
            let folder = connection.store.folder
            try connection.close()
            connection = try OverlayConnection(fixture.open(folder))
            #expect(try connection.digests() == expected)
            #expect(try connection.queue.read { try String.fetchOne($0, sql: "PRAGMA integrity_check") } == "ok")
            #expect(try connection.queue.read { try String.fetchOne($0, sql: "PRAGMA journal_mode") } == "delete")
            // > Only the pages written are in the overlay: the rest is read from the bundle.
            let present = connection.store.presentPages.count
            let allocated = try OverlayFiles.allocatedBytes(folder.appending(OverlayStore.overlayName))
            #expect(present > 0 && Int64(present) * 4096 < storeSize / 8, "\(present) pages of \(storeSize / 4096)")
            #expect(allocated < storeSize / 8, "\(allocated) bytes allocated for a store of \(storeSize)")
            #expect(try FileSystem.status(folder.appending("overlay-journal")) == nil, "no journal after a commit")
            for name in [OverlayStore.overlayName, OverlayStore.mapName] {
                #expect(try FileSystem.status(folder.appending(name))?.permissions.rawValue == 0o600, "\(name)")
            }
            try connection.close()
        }
    }

    @Test("a map that names another base is refused with its own error, and nothing is removed or changed")
    func anotherBase() async throws {
        try await withTemporaryDirectory { directory in
            let fixture = try OverlayFixture(in: directory, bytes: 600_000)
            let connection = try OverlayConnection(fixture.create("wc", in: directory))
            try Self.change([connection.queue], round: 1)
            try connection.close()
            let folder = connection.store.folder
            let before = try FileSystem.contentsOfDirectory(folder).map { try Fixtures.bytes(of: folder.appending($0)) }
            for digest in [String(repeating: "0", count: 64), String(fixture.digest.dropLast()) + "x"] {
                let error = try #require(throws: DocumentError.self) {
                    _ = try OverlayStore.open(folder: folder, base: fixture.source(), expectedDigest: digest)
                }
                #expect(error.code == .metadataMismatch, "\(error)")
                #expect(error.path == folder.appending(OverlayStore.mapName))
            }
            let after = try FileSystem.contentsOfDirectory(folder).map { try Fixtures.bytes(of: folder.appending($0)) }
            #expect(after == before)
            // > The right base still opens it.
            let reopened = try OverlayConnection(fixture.open(folder))
            #expect(try reopened.queue.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM extra") } == 1)
            try reopened.close()
        }
    }

    @Test("a base that fails to read fails the query, and its own error is kept for the caller")
    func baseFailure() async throws {
        try await withTemporaryDirectory { directory in
            let fixture = try OverlayFixture(in: directory, bytes: 1_200_000)
            let base = FailingSource(try StoreFileReader(fixture.loose))
            let folder = directory.appending("wc")
            try FileSystem.createDirectory(folder, mode: 0o700)
            let store = try OverlayStore.create(folder: folder, base: base, pageSize: 4096,
                                                baseIdentity: fixture.identity, baseDigest: fixture.digest)
            let connection = try OverlayConnection(store)
            #expect(try connection.queue.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM sqlite_master") } == 1)
            base.isFailing.withLock { $0 = true }
            let error = #expect(throws: (any Error).self) {
                try connection.queue.read { try Int.fetchOne($0, sql: "SELECT sum(length(payload)) FROM blob") }
            }
            #expect(store.failure?.code == .checksumMismatch)
            let reported = try #require(error.map { store.reported($0) } as? DocumentError)
            #expect(reported.code == .checksumMismatch && reported.path == fixture.loose, "\(reported)")
            try connection.close()
        }
    }

    @Test("unaligned writes, truncation and growth read as a file does, before and after a reopen")
    func bytesAsAFile() async throws {
        try await withTemporaryDirectory { directory in
            var generator = SeededGenerator(seed: 41)
            let baseBytes = (0..<40_000).map { _ in UInt8.random(in: 1...255, using: &generator) }
            let basePath = directory.appending("base")
            try Data(baseBytes).write(to: URL(fileURLWithPath: basePath.string))
            let folder = directory.appending("wc")
            try FileSystem.createDirectory(folder, mode: 0o700)
            let identity = OverlayMap.BaseIdentity(device: 1, inode: 2, size: 3, modified: 4, changed: 5)
            var store = try OverlayStore.create(folder: folder, base: StoreFileReader(basePath), pageSize: 4096,
                                                baseIdentity: identity, baseDigest: "d")
            var model = baseBytes
            for step in 0..<300 {
                switch Int.random(in: 0..<10, using: &generator) {
                case 0..<6:
                    let offset = Int.random(in: 0...(model.count + 9000), using: &generator)
                    let count = Int.random(in: 1...9000, using: &generator)
                    let bytes = (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
                    model += [UInt8](repeating: 0, count: max(0, offset + count - model.count))
                    model.replaceSubrange(offset..<(offset + count), with: bytes)
                    let status = bytes.withUnsafeBytes { store.sqliteWrite($0.baseAddress!, count: count, at: Int64(offset)) }
                    #expect(status == 0)
                case 6..<8:
                    let size = Int.random(in: 0...(model.count + 5000), using: &generator)
                    model = Array(model.prefix(size)) + [UInt8](repeating: 0, count: max(0, size - model.count))
                    #expect(store.sqliteTruncate(Int64(size)) == 0)
                case 8:
                    #expect(store.sqliteSync() == 0)
                default:
                    #expect(store.sqliteSync() == 0)
                    store = try OverlayStore.open(folder: folder, base: StoreFileReader(basePath), expectedDigest: "d")
                }
                let same = try store.logicalSize == Int64(model.count)
                    && store.bytes(at: 0, count: model.count + 100) == model
                #expect(same, "step \(step)")
                if !same { break }
            }
        }
    }

    @Test("a map is read up to its last good record: a torn one, a bad checksum or a gap in sequence ends it")
    func mapRecords() throws {
        let header = OverlayMap.Header(pageSize: 4096,
                                       baseIdentity: .init(device: 1, inode: 2, size: 3, modified: 4, changed: 5),
                                       baseDigest: "abc", baseSize: 8192)
        let records = (1...3).map {
            OverlayMap.Record(sequence: UInt64($0), logicalSize: 8192 * Int64($0), baseLimit: 8192,
                              pages: [Int64($0), Int64($0) * 10])
        }
        let head = OverlayMap.encode(header)
        let bodies = records.map(OverlayMap.encode)
        let whole = head + bodies.joined()
        let path = FilePath("/wc/map")
        let parsed = try OverlayMap(parsing: whole, path: path)
        #expect(parsed.header == header && parsed.records == records && parsed.length == whole.count)
        #expect(try OverlayMap(parsing: Array(whole.dropLast(3)), path: path).records == Array(records.prefix(2)))
        var flipped = whole
        flipped[head.count + bodies[0].count + 10] ^= 1
        #expect(try OverlayMap(parsing: flipped, path: path).records == Array(records.prefix(1)))
        let gap = head + bodies[0] + bodies[2]
        #expect(try OverlayMap(parsing: gap, path: path).length == head.count + bodies[0].count)
        var badHeader = whole
        badHeader[20] ^= 1
        #expect(throws: DocumentError.self) { _ = try OverlayMap(parsing: badHeader, path: path) }
        // > Numbers no SQLite store reaches, with good checksums: the record is read as damaged, not trusted.
        for hostile in [OverlayMap.Record(sequence: 2, logicalSize: 1 << 60, baseLimit: 8192, pages: [1]),
                        OverlayMap.Record(sequence: 2, logicalSize: 8192, baseLimit: 8192, pages: [1, 1 << 61]),
                        OverlayMap.Record(sequence: 2, logicalSize: 8192, baseLimit: 8192, pages: [Int64.max])] {
            let map = try OverlayMap(parsing: head + bodies[0] + OverlayMap.encode(hostile) + bodies[2], path: path)
            #expect(map.records == Array(records.prefix(1)) && map.length == head.count + bodies[0].count)
        }
    }
}

/// A base that throws a segment's checksum error once told to.
final class FailingSource: ServedStore {
    let inner: StoreFileReader
    let isFailing = Mutex(false)

    init(_ inner: StoreFileReader) { self.inner = inner }

    var size: Int64 { inner.size }
    var origin: FilePath { inner.origin }
    var failure: DocumentError? { inner.failure }
    func fail(_ error: DocumentError) { inner.fail(error) }

    func read(into buffer: UnsafeMutableRawPointer, count: Int, at offset: Int64) throws -> Int {
        if isFailing.withLock({ $0 }) {
            throw DocumentError(.checksumMismatch, path: origin, entry: BundleLayout.store,
                                reason: "segment 3 does not match its digest")
        }
        return try inner.read(into: buffer, count: count, at: offset)
    }
}

extension OverlayStoreTests {
    @Test("reset switches to a new base holding what SQLite sees (a save's bundle) under the open connection")
    func resetToNewBase() async throws {
        try await withTemporaryDirectory { directory in
            let fixture = try OverlayFixture(in: directory, bytes: 1_500_000)
            let connection = try OverlayConnection(fixture.create("wc", in: directory))
            try Self.change([connection.queue], round: 1)
            let store = connection.store
            // > What a save writes: the store as SQLite sees it, base and overlay composed.
            let saved = directory.appending("saved.sqlite")
            try Data(store.bytes(at: 0, count: Int(store.logicalSize))).write(to: URL(fileURLWithPath: saved.string))
            let bundle = directory.appending("Saved.mdz")
            try BundleWriter.write(BundleContent(store: saved), metadata: DocumentMetadata(), to: bundle,
                                   options: WritingOptions())
            let newBase = OverlayFixture(bundle: bundle, loose: saved,
                                         identity: OverlayMap.BaseIdentity(try Stat(bundle, followTargetSymlink: false).identity),
                                         digest: try BundleReader(at: bundle).metadata.store.contentDigest)
            let before = try connection.digests()
            try store.reset(newBase: newBase.source(), identity: newBase.identity, digest: newBase.digest)
            #expect(store.presentPages.isEmpty)
            #expect(try FileSystem.status(store.overlayPath)?.size == 0)
            #expect(try connection.digests() == before, "the same connection reads the same rows from the new base")
            let model = try newBase.model(at: directory.appending("model.sqlite"))
            try Self.change([connection.queue, model], round: 2)
            #expect(try connection.digests() == OverlayFiles.digests(model))
            try connection.close()
            let error = #expect(throws: DocumentError.self) { _ = try fixture.open(store.folder) }
            #expect(error?.code == .metadataMismatch, "the old base is refused")
            let reopened = try OverlayConnection(newBase.open(store.folder))
            #expect(try reopened.digests() == OverlayFiles.digests(model))
            try reopened.close()
        }
    }
}

extension OverlayStoreTests {
    @Test("the store never goes to WAL mode, even in exclusive locking mode")
    func noWAL() async throws {
        try await withTemporaryDirectory { directory in
            let fixture = try OverlayFixture(in: directory, bytes: 300_000)
            let connection = try OverlayConnection(fixture.create("wc", in: directory))
            for locking in ["NORMAL", "EXCLUSIVE"] {
                let error = #expect(throws: DatabaseError.self, "\(locking)") {
                    try connection.queue.writeWithoutTransaction { db in
                        try db.execute(sql: "PRAGMA locking_mode = \(locking)")
                        _ = try String.fetchOne(db, sql: "PRAGMA journal_mode = WAL")
                    }
                }
                #expect(error?.message?.contains("rollback journal mode") == true, "\(String(describing: error))")
            }
            try connection.queue.writeWithoutTransaction { try $0.execute(sql: "PRAGMA locking_mode = NORMAL") }
            #expect(try connection.queue.read { try String.fetchOne($0, sql: "PRAGMA journal_mode") } == "delete")
            #expect(try FileSystem.status(connection.store.folder.appending("overlay-wal")) == nil)
            try Self.change([connection.queue], round: 1)
            try connection.close()
        }
    }
}
