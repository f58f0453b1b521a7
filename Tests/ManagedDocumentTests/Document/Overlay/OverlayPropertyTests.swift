import Foundation
import GRDB
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

/// Random SQL applied to a working copy and to a plain store file (the model): after every step, both read the same.
@Suite("Working copies under random SQL: every step reads as the same SQL on a plain store file")
struct OverlayPropertyTests {
    /// The working copy and the model, and what the steps choose from.
    struct Run {
        let fixture: OverlayFixture
        let folder: FilePath
        var connection: OverlayConnection
        let model: DatabaseQueue
        var generator: SeededGenerator
        var tables: [String] = ["blob"]
        var nextTable = 0

        /// Runs `body` on both connections, the working copy's first.
        func both(_ body: (DatabaseQueue) throws -> Void) throws {
            try body(connection.queue)
            try body(model)
        }

        /// The same statement, in one transaction, on both.
        func execute(_ sql: String, _ arguments: StatementArguments = []) throws {
            try both { queue in try queue.write { try $0.execute(sql: sql, arguments: arguments) } }
        }

        /// The same statement, outside any transaction (VACUUM, pragmas), on both.
        func executeAlone(_ sql: String) throws {
            try both { queue in try queue.writeWithoutTransaction { try $0.execute(sql: sql) } }
        }

        /// `count` random bytes.
        mutating func data(_ count: Int) -> Data {
            var words = (0..<(count / 8 + 1)).map { _ in generator.next() }
            return words.withUnsafeMutableBytes { Data($0.prefix(count)) }
        }

        mutating func pick<T>(_ values: [T]) -> T { values[Int.random(in: 0..<values.count, using: &generator)] }

        mutating func number(_ range: ClosedRange<Int>) -> Int { Int.random(in: range, using: &generator) }
    }

    /// One random step; what it did, for the failure message.
    static func step(_ run: inout Run, index: Int) throws -> String {
        if index == 90 {
            try run.executeAlone("PRAGMA page_size = 8192")
            try run.executeAlone("VACUUM")
            return "page_size 8192 and VACUUM"
        }
        if index == 150 {
            try run.executeAlone("PRAGMA page_size = 1024")
            try run.executeAlone("VACUUM")
            return "page_size 1024 and VACUUM"
        }
        switch run.number(0...13) {
        case 0...2:
            let table = run.pick(run.tables)
            let count = run.number(1...60)
            let payload = run.data(run.number(0...2000))
            try run.both { queue in
                try queue.write { db in
                    for row in 0..<count {
                        try db.execute(sql: "INSERT INTO \"\(table)\"(payload, text) VALUES (?, ?)",
                                       arguments: [payload, "step \(index) row \(row)"])
                    }
                }
            }
            return "insert \(count) into \(table)"
        case 3...4:
            let table = run.pick(run.tables), modulus = run.number(2...30), rest = run.number(0...1)
            try run.execute("UPDATE \"\(table)\" SET text = text || ? WHERE id % ? = ?", ["u\(index)", modulus, rest])
            return "update \(table) where id % \(modulus) = \(rest)"
        case 5:
            let table = run.pick(run.tables), modulus = run.number(2...12)
            try run.execute("DELETE FROM \"\(table)\" WHERE id % ? = 0", [modulus])
            return "delete from \(table) where id % \(modulus) = 0"
        case 6:
            run.nextTable += 1
            let table = "t\(run.nextTable)"
            try run.execute("CREATE TABLE \"\(table)\"(id INTEGER PRIMARY KEY, payload BLOB, text TEXT)")
            run.tables.append(table)
            return "create \(table)"
        case 7:
            guard run.tables.count > 1 else { return "nothing to drop" }
            let table = run.tables.remove(at: run.number(1...(run.tables.count - 1)))
            try run.execute("DROP TABLE \"\(table)\"")
            return "drop \(table)"
        case 8...9:
            let size = run.number(0...(300 << 10))
            let blob = run.data(size)
            try run.execute("CREATE TABLE IF NOT EXISTS big(id INTEGER PRIMARY KEY, data BLOB)")
            if run.number(0...1) == 0 {
                try run.execute("INSERT INTO big(data) VALUES (?)", [blob])
                return "insert a blob of \(size) bytes"
            }
            try run.execute("UPDATE big SET data = ? WHERE id = (SELECT max(id) FROM big)", [blob])
            return "resize the last blob to \(size) bytes"
        case 10:
            try run.execute("CREATE TABLE IF NOT EXISTS big(id INTEGER PRIMARY KEY, data BLOB)")
            try run.execute("DELETE FROM big WHERE id % 2 = ?", [run.number(0...1)])
            return "delete half the blobs"
        case 11:
            try run.executeAlone("VACUUM")
            return "VACUUM"
        case 12:
            // > A transaction that spills pages to the store, then rolls back: the journal is played back.
            try run.both { queue in
                try queue.inTransaction { db in
                    try db.execute(sql: "PRAGMA cache_size = 2")
                    try db.execute(sql: "UPDATE blob SET text = text || 'spill', payload = zeroblob(700)")
                    return .rollback
                }
                try queue.writeWithoutTransaction { try $0.execute(sql: "PRAGMA cache_size = -2000") }
            }
            return "a spilled transaction rolled back"
        default:
            try run.connection.close()
            run.connection = try OverlayConnection(run.fixture.open(run.folder))
            return "close and reopen"
        }
    }

    @Test("200 random steps: inserts, updates, deletes, tables made and dropped, blobs of up to 300 KiB, VACUUM, page size changes, reopens",
          arguments: [20_261_125 as UInt64])
    func randomSteps(seed: UInt64) async throws {
        try await withTemporaryDirectory { directory in
            let fixture = try OverlayFixture(in: directory, bytes: 1_500_000)
            let connection = try OverlayConnection(fixture.create("wc", in: directory))
            let model = try fixture.model(at: directory.appending("model.sqlite"))
            var run = Run(fixture: fixture, folder: connection.store.folder, connection: connection, model: model,
                          generator: SeededGenerator(seed: seed))
            var done: [String] = []
            for index in 0..<200 {
                done.append(try Self.step(&run, index: index))
                let same = try run.connection.digests() == OverlayFiles.digests(model)
                #expect(same, "seed \(seed), step \(index): \(done.suffix(5).joined(separator: "; "))")
                if !same { break }
            }
            let pageSize = try run.connection.queue.read { try Int.fetchOne($0, sql: "PRAGMA page_size") }
            #expect(pageSize == 1024, "seed \(seed)")
            try run.connection.close()
            run.connection = try OverlayConnection(fixture.open(run.folder))
            #expect(try run.connection.digests() == OverlayFiles.digests(model), "seed \(seed), after a reopen")
            #expect(try run.connection.queue.read { try String.fetchOne($0, sql: "PRAGMA integrity_check") } == "ok",
                    "seed \(seed)")
            #expect(try run.connection.store.logicalSize == FileSystem.status(directory.appending("model.sqlite"))?.size,
                    "seed \(seed): the same size as the model's file")
            try run.connection.close()
        }
    }
}
