// StoreHeader is the one reader of SQLite's 100-byte header; these tests need it directly (an internal type), and
// compare what it reads with what SQLite itself reports for the same file.
import Foundation
import GRDB
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

@Suite("SQLite's header is read in one place, every number checked")
struct StoreHeaderTests {
    @Test("the fields read agree with SQLite's own answers for real stores of every page size")
    func agreesWithSQLite() async throws {
        try await withTemporaryDirectory { directory in try checkAgainstSQLite(in: directory) }
    }

    private func checkAgainstSQLite(in directory: FilePath) throws {
        for pageSize in [512, 4096, 65_536] {
            let store = directory.appending("s\(pageSize).sqlite")
            let queue = try DatabaseQueue(path: store.string)
            try queue.writeWithoutTransaction { db in
                try db.execute(sql: "PRAGMA page_size = \(pageSize); PRAGMA journal_mode = DELETE")
                try db.execute(sql: "CREATE TABLE t(x); INSERT INTO t VALUES (randomblob(3000))")
                try db.execute(sql: "INSERT INTO t VALUES (1)")
            }
            let pages = try queue.read { db in try Int.fetchOne(db, sql: "PRAGMA page_count")! }
            try queue.close()
            let header = try StoreHeader(of: store)
            #expect(header.pageSize == pageSize)
            #expect(header.declaredSize == UInt64(pageSize * pages))
            #expect(!header.isWAL)
            #expect(header.changeCounter >= 2, "two write transactions after the first")
            let counterBytes = Array(try Data(contentsOf: URL(fileURLWithPath: store.string))[24..<28])
            #expect(StoreHeader.changeCounter(counterBytes) == header.changeCounter)
        }
    }

    @Test("hostile or cut-short headers give nil or a specific error, never a trap")
    func hostile() throws {
        var bytes = StoreHeader.magic + [UInt8](repeating: 0xFF, count: StoreHeader.length - StoreHeader.magic.count)
        // > Page size 0xFFFF (not a power of two), page count 2^32 - 1, every counter at its maximum.
        let header = try #require(StoreHeader(bytes))
        #expect(header.pageSize == nil)
        #expect(header.declaredSize == nil)
        #expect(header.changeCounter == UInt32.max)
        bytes[16] = 0; bytes[17] = 1  // 1 stands for 65536
        #expect(StoreHeader(bytes)?.pageSize == 65_536)
        #expect(StoreHeader(bytes)?.declaredSize == 65_536 * UInt64(UInt32.max), "the largest product, no overflow")
        for raw in [0, 256, 511, 513, 3000, 32_769] {
            bytes[16] = UInt8(raw >> 8); bytes[17] = UInt8(raw & 0xFF)
            #expect(StoreHeader(bytes)?.pageSize == nil, "page size \(raw) is refused")
        }
        #expect(StoreHeader(Array(bytes.prefix(99))) == nil, "cut short")
        #expect(StoreHeader.pageSize(Array(bytes.prefix(17))) == nil)
        #expect(StoreHeader.changeCounter([1, 2, 3]) == nil)
        var notSQLite = bytes
        notSQLite[0] = UInt8(ascii: "X")
        #expect(StoreHeader(notSQLite) == nil)
        let error = #expect(throws: DocumentError.self) {
            _ = try StoreHeader(checking: notSQLite, of: "x.sqlite", entry: "StoreContent/persistentStore", bundle: "b.mdz")
        }
        #expect(error?.code == .notSQLite && error?.path == "b.mdz")
        bytes[18] = 2
        #expect(StoreHeader(bytes)?.isWAL == true)
    }

    @Test("two stores SQLite cannot tell apart by their header state collide; any difference does not")
    func stateCollision() {
        let state = [UInt8](repeating: 7, count: StoreHeader.stateRange.count)
        #expect(StoreHeader.statesCollide(state, state))
        var other = state
        other[3] = 8
        #expect(!StoreHeader.statesCollide(state, other))
        #expect(!StoreHeader.statesCollide(Array(state.prefix(19)), Array(state.prefix(19))), "cut short never collides")
    }
}
