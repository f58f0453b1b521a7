import Foundation
import GRDB
import Synchronization
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

/// Crash images of a working copy (FORMAT.md 16.2): the files as a crash at a given moment leaves them, copied aside
/// and opened; each must read as the last committed transaction.
@Suite("Working copy crash images: opened, each reads as the last committed transaction")
struct OverlayCrashTests {
    @Test("a crash in a transaction that spilled pages to the overlay: the hot journal rolls it back")
    func spilled() async throws {
        try await withTemporaryDirectory { directory in
            let fixture = try OverlayFixture(in: directory, bytes: 2_000_000)
            let connection = try OverlayConnection(fixture.create("wc", in: directory))
            try OverlayStoreTests.change([connection.queue], round: 1)
            let committed = try connection.digests()
            let folder = connection.store.folder
            let overlayBefore = try Fixtures.bytes(of: folder.appending(OverlayStore.overlayName))
            let image = directory.appending("image")
            try connection.queue.inTransaction { db in
                try db.execute(sql: "PRAGMA cache_size = 2")
                try db.execute(sql: "UPDATE blob SET text = text || 'spilled', payload = zeroblob(500)")
                try OverlayFiles.image(of: folder, to: image)
                return .rollback
            }
            #expect(try FileSystem.status(image.appending("overlay-journal")) != nil, "the journal is hot")
            #expect(try Fixtures.bytes(of: image.appending(OverlayStore.overlayName)) != overlayBefore,
                    "pages were spilled to the overlay before the commit")
            #expect(try connection.digests() == committed)
            try connection.close()
            let recovered = try OverlayConnection(fixture.open(image))
            #expect(try recovered.digests() == committed)
            #expect(try recovered.queue.read { try String.fetchOne($0, sql: "PRAGMA integrity_check") } == "ok")
            try recovered.close()
            #expect(try FileSystem.status(image.appending("overlay-journal")) == nil, "rolled back and deleted")
        }
    }

    /// A working copy with one transaction committed, and the image taken in the next commit's `xSync`, once the
    /// overlay was flushed and before its record was appended; the map as that commit left it.
    struct SyncImage {
        let fixture: OverlayFixture
        let image: FilePath
        let committed: [String: String]
        let finalMap: [UInt8]
        let imageMapLength: Int
    }

    static func syncImage(in directory: FilePath, pagesPerRecord: Int? = nil) throws -> SyncImage {
        let fixture = try OverlayFixture(in: directory, bytes: 2_000_000)
        let connection = try OverlayConnection(fixture.create("wc", in: directory))
        if let pagesPerRecord { connection.store.pagesPerRecord = pagesPerRecord }
        try OverlayStoreTests.change([connection.queue], round: 1)
        let committed = try connection.digests()
        let folder = connection.store.folder
        let image = directory.appending("image")
        let taken = Mutex(0)
        connection.store.afterOverlaySync = {
            taken.withLock { count in
                if count == 0 { try? OverlayFiles.image(of: folder, to: image) }  // checked below
                count += 1
            }
        }
        try OverlayStoreTests.change([connection.queue], round: 2)
        #expect(taken.withLock { $0 } == 1, "one record in the commit")
        #expect(try connection.digests() != committed)
        try connection.close()
        let finalMap = try Fixtures.bytes(of: folder.appending(OverlayStore.mapName))
        let imageMapLength = try Fixtures.bytes(of: image.appending(OverlayStore.mapName)).count
        #expect(finalMap.count > imageMapLength)
        #expect(try FileSystem.status(image.appending("overlay-journal")) != nil, "the journal is hot")
        return SyncImage(fixture: fixture, image: image, committed: committed, finalMap: finalMap,
                         imageMapLength: imageMapLength)
    }

    @Test("a crash in xSync after the overlay was flushed, before the record: the previous commit")
    func beforeRecord() async throws {
        try await withTemporaryDirectory { directory in
            let taken = try Self.syncImage(in: directory)
            let recovered = try OverlayConnection(taken.fixture.open(taken.image))
            #expect(try recovered.digests() == taken.committed)
            #expect(try recovered.queue.read { try String.fetchOne($0, sql: "PRAGMA integrity_check") } == "ok")
            try recovered.close()
        }
    }

    @Test("a torn last record, or one whose checksum fails (a flipped byte in it, in its checksum), is cut off",
          arguments: ["torn", "checksum", "body"])
    func damagedRecord(damage: String) async throws {
        try await withTemporaryDirectory { directory in
            let taken = try Self.syncImage(in: directory)
            var map = taken.finalMap
            switch damage {
            case "torn": map.removeLast(3)
            case "checksum": map[map.count - 1] ^= 0x20
            default: map[taken.imageMapLength + 8] ^= 0x01  // the sequence number: the checksum fails
            }
            let mapPath = taken.image.appending(OverlayStore.mapName)
            try Data(map).write(to: URL(fileURLWithPath: mapPath.string))
            let store = try taken.fixture.open(taken.image)
            #expect(try Fixtures.bytes(of: mapPath).count == taken.imageMapLength, "cut back to the last good record")
            // > SQLite's rollback of the hot journal then appends a record of its own.
            let recovered = try OverlayConnection(store)
            #expect(try recovered.digests() == taken.committed)
            #expect(try recovered.queue.read { try String.fetchOne($0, sql: "PRAGMA integrity_check") } == "ok")
            try recovered.close()
        }
    }

    @Test("a crash between the records of one xSync (a commit of many pages, recorded 2 pages a record): every prefix of them reads as the previous commit")
    func betweenRecords() async throws {
        try await withTemporaryDirectory { directory in
            let taken = try Self.syncImage(in: directory, pagesPerRecord: 2)
            // > Where the map's records end, for each prefix of the commit's bytes (the parser stops at the last whole one).
            var ends: [Int] = []
            for cut in taken.imageMapLength...taken.finalMap.count {
                let end = try OverlayMap(parsing: Array(taken.finalMap[..<cut]), path: taken.image).length
                if end > taken.imageMapLength, end < taken.finalMap.count, ends.last != end { ends.append(end) }
            }
            #expect(ends.count >= 3, "the commit wrote several records")
            for (index, end) in ends.enumerated() where index % max(1, ends.count / 6) == 0 {
                let image = directory.appending("image-\(end)")
                try OverlayFiles.image(of: taken.image, to: image)
                try Data(taken.finalMap[..<end]).write(to: URL(fileURLWithPath: image.appending(OverlayStore.mapName).string))
                let recovered = try OverlayConnection(taken.fixture.open(image))
                #expect(try recovered.digests() == taken.committed, "map cut after \(end) bytes")
                #expect(try recovered.queue.read { try String.fetchOne($0, sql: "PRAGMA integrity_check") } == "ok")
                try recovered.close()
            }
        }
    }

    @Test("the whole map of a commit whose journal was not yet deleted: SQLite rolls back to the previous commit")
    func afterRecord() async throws {
        try await withTemporaryDirectory { directory in
            let taken = try Self.syncImage(in: directory)
            let mapPath = taken.image.appending(OverlayStore.mapName)
            try Data(taken.finalMap).write(to: URL(fileURLWithPath: mapPath.string))
            let recovered = try OverlayConnection(taken.fixture.open(taken.image))
            #expect(try recovered.digests() == taken.committed)
            try recovered.close()
        }
    }
}

extension OverlayCrashTests {
    @Test("a store made smaller (VACUUM) is recorded at once: SQLite truncates after its commit, with no xSync after")
    func truncatedAfterCommit() async throws {
        try await withTemporaryDirectory { directory in
            let fixture = try OverlayFixture(in: directory, bytes: 2_000_000)
            let connection = try OverlayConnection(fixture.create("wc", in: directory))
            try connection.queue.write { try $0.execute(sql: "DELETE FROM blob WHERE id % 3 <> 0") }
            try connection.queue.writeWithoutTransaction { try $0.execute(sql: "VACUUM") }
            let committed = try connection.digests()
            let pages = try connection.queue.read { try Int64.fetchOne($0, sql: "PRAGMA page_count") } ?? 0
            let before = try Stat(fixture.loose, followTargetSymlink: false).size
            #expect(connection.store.logicalSize == pages * 4096 && pages * 4096 < before)
            let image = directory.appending("image")
            try OverlayFiles.image(of: connection.store.folder, to: image)
            try connection.close()
            let store = try fixture.open(image)
            #expect(store.logicalSize == pages * 4096, "the map records the smaller size")
            let recovered = try OverlayConnection(store)
            #expect(try recovered.digests() == committed)
            try recovered.close()
        }
    }
}
