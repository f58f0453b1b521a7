// The legacy store scripts/bench-convert.sh converts, and the library call behind `docconvert convert`.
//
//   convert-benchmark generate STORE MB WALMB          a Core Data-like store of about MB MiB in WAL mode whose
//                                                      last WALMB MiB of transactions live only in STORE-wal
//   convert-benchmark convert SOURCE BUNDLE deflate|store   LegacyConverter with --legacy keep; prints only errors
//
// The script times the real `docconvert convert` (what users run); `convert` here is the same conversion without
// the command-line layer, for comparing the two or profiling the library alone.
//
// `generate` writes the store in a private folder beside STORE: the main part with a rollback journal, then
// `journal_mode = WAL` with automatic checkpoints off for the tail, committed in many small transactions that also
// update rows already in the main file. While that connection is still open (so nothing has checkpointed the
// tail), the store, its -wal and its -shm are copied to STORE: what an app killed before its last checkpoint leaves
// behind. The private folder is then removed. Deterministic except for SQLite's WAL salts.
//
// Plain arguments on purpose: no argument parser, so the timed process holds only the library and GRDB.
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import BenchmarkSupport
import GRDB
import ManagedDocument
import SystemPackage

@main
struct ConvertBenchmark {
    static let usage = """
        usage: convert-benchmark generate STORE MB WALMB
               convert-benchmark convert SOURCE BUNDLE deflate|store
        """

    static func main() {
        let arguments = Array(CommandLine.arguments.dropFirst())
        do {
            switch (arguments.first, arguments.count) {
            case ("generate", 4):
                guard let mib = Int(arguments[2]), mib > 0, let walMiB = Int(arguments[3]), walMiB > 0 else {
                    fail("MB and WALMB must be positive integers\n\(usage)", status: 64)
                }
                try generate(at: FilePath(arguments[1]), mib: mib, walMiB: walMiB)
            case ("convert", 4):
                let compression: WritingOptions.Compression
                switch arguments[3] {
                case "deflate": compression = .deflate
                case "store": compression = .store
                default: fail("the compression is deflate or store, not \(arguments[3])\n\(usage)", status: 64)
                }
                var options = ConversionOptions()
                options.legacyPolicy = .keep
                options.writing = WritingOptions(compression: compression)
                try LegacyConverter(options: options).convert(storeAt: FilePath(arguments[1]),
                                                              to: FilePath(arguments[2]))
            default:
                fail(usage, status: 64)
            }
        } catch {
            fail("convert-benchmark: \(error)", status: 1)
        }
    }

    // MARK: The store

    /// Core Data's bookkeeping (`Z_PRIMARYKEY`, `Z_METADATA` with a binary plist and `Z_UUID`, `Z_MODELCACHE`), a
    /// small `ZTAG` entity and a large `ZENTRY` entity with a to-one relationship (indexed, as Core Data does).
    static let schema = """
        CREATE TABLE Z_PRIMARYKEY (Z_ENT INTEGER PRIMARY KEY, Z_NAME VARCHAR, Z_SUPER INTEGER, Z_MAX INTEGER);
        CREATE TABLE Z_METADATA (Z_VERSION INTEGER PRIMARY KEY, Z_UUID VARCHAR(255), Z_PLIST BLOB);
        CREATE TABLE Z_MODELCACHE (Z_CONTENT BLOB);
        CREATE TABLE ZTAG (Z_PK INTEGER PRIMARY KEY, Z_ENT INTEGER, Z_OPT INTEGER, ZNAME VARCHAR);
        CREATE TABLE ZENTRY (Z_PK INTEGER PRIMARY KEY, Z_ENT INTEGER, Z_OPT INTEGER, ZTAG INTEGER, ZDATE TIMESTAMP,
                             ZTITLE VARCHAR, ZBODY VARCHAR, ZPHOTO BLOB);
        CREATE INDEX ZENTRY_ZTAG_INDEX ON ZENTRY (ZTAG);
        """
    static let tagCount = 8

    /// Writes the store described at the top of this file. Rows alternate text (made-up words drawn with a Zipf
    /// law, about 3x compressible by deflate, like prose) and random blobs (incompressible, like photos), 64...1536
    /// bytes each, as in the bundle and document benchmarks.
    static func generate(at store: FilePath, mib: Int, walMiB: Int) throws {
        guard let name = store.lastComponent?.string else { fail("convert-benchmark: no file name in \(store)", status: 64) }
        for suffix in ["", "-wal", "-shm", "-journal"] where FileManager.default.fileExists(atPath: store.string + suffix) {
            fail("convert-benchmark: \(store.string + suffix) already exists", status: 73)
        }
        let folder = store.removingLastComponent().appending(".\(name)-generating")
        try? FileManager.default.removeItem(atPath: folder.string)  // Squash: a leftover of an interrupted run, or none.
        try FileManager.default.createDirectory(atPath: folder.string, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder.string) }  // Squash cleanup error.
        let work = folder.appending(name)

        var random = SplitMix64(seed: 20_261_123)
        let corpus = makeCorpus(&random)
        var configuration = Configuration()
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA wal_autocheckpoint = 0")
            try db.execute(sql: "PRAGMA synchronous = OFF")
            try db.execute(sql: "PRAGMA cache_size = -65536")
        }
        let queue = try DatabaseQueue(path: work.string, configuration: configuration)
        var entries = 0
        let walEntries: Int = try queue.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA page_size = 4096")
            try db.execute(sql: "PRAGMA journal_mode = DELETE")
            try db.inTransaction {
                try db.execute(sql: schema)
                for (entity, name) in ["Entry", "Tag"].enumerated() {
                    try db.execute(sql: "INSERT INTO Z_PRIMARYKEY VALUES (?, ?, 0, 0)", arguments: [entity + 1, name])
                }
                try db.execute(sql: "INSERT INTO Z_METADATA VALUES (1, ?, ?)",
                               arguments: ["6F1C2A4E-93B7-4D05-8E21-C4A9B3D70F58", try metadataPlist()])
                try db.execute(sql: "INSERT INTO Z_MODELCACHE VALUES (?)", arguments: [Data(repeating: 0x5A, count: 2048)])
                for tag in 1...tagCount {
                    try db.execute(sql: "INSERT INTO ZTAG VALUES (?, 2, 1, ?)", arguments: [tag, "tag \(tag)"])
                }
                try db.execute(sql: "UPDATE Z_PRIMARYKEY SET Z_MAX = ? WHERE Z_ENT = 2", arguments: [tagCount])
                return .commit
            }
            // The main file: large transactions, no WAL yet.
            let target = Int64(mib) << 20
            while try storeBytes(db) < target {
                try insertEntries(db, count: 2_000, next: &entries, corpus: corpus, random: &random, updates: 0)
            }
            // The tail: WAL mode, nothing checkpointed; small transactions that add rows and change old ones.
            let mode = try String.fetchOne(db, sql: "PRAGMA journal_mode = WAL")
            guard mode == "wal" else { fail("convert-benchmark: SQLite refused WAL mode (\(mode ?? "?"))", status: 70) }
            let walTarget = Int64(walMiB) << 20
            let checkpointed = entries
            while try fileSize(work.string + "-wal") < walTarget {
                try insertEntries(db, count: 200, next: &entries, corpus: corpus, random: &random, updates: 20)
            }
            return entries - checkpointed
        }
        // Copied while the connection is open: closing it would checkpoint the tail into the main file.
        for suffix in ["", "-wal", "-shm"] {
            try FileManager.default.copyItem(atPath: work.string + suffix, toPath: store.string + suffix)
        }
        try queue.close()
        let size = try fileSize(store.string), walSize = try fileSize(store.string + "-wal")
        print("generate \(store): store \(size) bytes, -wal \(walSize) bytes; \(entries) entries, the last \(walEntries) and 20 updates per 200 only in the -wal")
    }

    /// One transaction: `count` new entries, `updates` changes to random older ones, and Core Data's key counter.
    static func insertEntries(_ db: Database, count: Int, next: inout Int, corpus: [UInt8],
                              random: inout SplitMix64, updates: Int) throws {
        try db.inTransaction {
            let insert = try db.cachedStatement(sql: "INSERT INTO ZENTRY VALUES (?, 1, 1, ?, ?, ?, ?, ?)")
            for _ in 0..<count {
                next += 1
                let length = Int.random(in: 64...1536, using: &random)
                let tag: Int? = next % 10 == 0 ? nil : 1 + next % tagCount
                let date = 7.0e8 + Double(next) * 61.0
                if next % 2 == 1 {
                    let start = Int.random(in: 0..<(corpus.count - length), using: &random)
                    let body = String(decoding: corpus[start..<start + length], as: UTF8.self)
                    try insert.execute(arguments: [next, tag, date, String(body.prefix(24)), body, nil])
                } else {
                    var bytes = [UInt8](repeating: 0, count: length)
                    random.fill(&bytes)
                    try insert.execute(arguments: [next, tag, date, "photo", nil, Data(bytes)])
                }
            }
            let update = try db.cachedStatement(sql: "UPDATE ZENTRY SET Z_OPT = Z_OPT + 1 WHERE Z_PK = ?")
            for _ in 0..<updates {
                try update.execute(arguments: [Int.random(in: 1...next, using: &random)])
            }
            try db.execute(sql: "UPDATE Z_PRIMARYKEY SET Z_MAX = ? WHERE Z_ENT = 1", arguments: [next])
            return .commit
        }
    }

    /// The binary property list Core Data keeps in `Z_METADATA.Z_PLIST`.
    static func metadataPlist() throws -> Data {
        let plist: [String: Any] = [
            "NSStoreType": "SQLite",
            "NSPersistenceFrameworkVersion": 1244,
            "NSStoreModelVersionIdentifiers": ["Journal 3"],
            "NSStoreModelVersionHashesVersion": 3,
            "NSStoreModelVersionHashes": ["Entry": Data(repeating: 0x01, count: 32), "Tag": Data(repeating: 0x02, count: 32)],
            "_NSAutoVacuumLevel": "2",
        ]
        return try PropertyListSerialization.data(fromPropertyList: plist, format: .binary, options: 0)
    }

    static func storeBytes(_ db: Database) throws -> Int64 {
        let pages = try Int64.fetchOne(db, sql: "PRAGMA page_count") ?? 0
        let pageSize = try Int64.fetchOne(db, sql: "PRAGMA page_size") ?? 0
        return pages * pageSize
    }

    /// The size of a file; 0 when it does not exist (yet: SQLite creates the -wal at the first write in WAL mode).
    static func fileSize(_ path: String) throws -> Int64 {
        guard FileManager.default.fileExists(atPath: path) else { return 0 }
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        return (attributes[.size] as? NSNumber)?.int64Value ?? 0
    }

    /// About 10 MB of space-separated made-up words (4000 of them, 2-10 letters) drawn with weights 1/rank
    /// (the document benchmark's corpus).
    static func makeCorpus(_ random: inout SplitMix64) -> [UInt8] {
        let letters = Array("etaoinshrdlucmfwypvbgkqjxz".utf8)
        let vocabulary: [[UInt8]] = (0..<4000).map { _ in
            (0..<Int.random(in: 2...10, using: &random)).map { _ in letters[Int.random(in: 0..<letters.count, using: &random)] }
        }
        var cumulative: [Double] = []
        cumulative.reserveCapacity(vocabulary.count)
        var total = 0.0
        for rank in 0..<vocabulary.count {
            total += 1.0 / Double(rank + 1)
            cumulative.append(total)
        }
        var corpus: [UInt8] = []
        corpus.reserveCapacity(11 << 20)
        for word in 0..<1_500_000 {
            let draw = Double.random(in: 0..<total, using: &random)
            var low = 0, high = cumulative.count - 1
            while low < high {  // the first rank whose cumulative weight exceeds the draw
                let middle = (low + high) / 2
                if cumulative[middle] > draw { high = middle } else { low = middle + 1 }
            }
            if word > 0 { corpus.append(UInt8(ascii: " ")) }
            corpus.append(contentsOf: vocabulary[low])
        }
        return corpus
    }

    // MARK: Support

    static func fail(_ message: String, status: Int32) -> Never { BenchmarkSupport.fail(message, status: status) }
}
