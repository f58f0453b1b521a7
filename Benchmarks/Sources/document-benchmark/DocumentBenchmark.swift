// The process that scripts/bench-document.sh times: one Document operation per run, timed in-process as well.
//
//   document-benchmark make-document BUNDLE MB [WORKDIR]   a new document of about MB MiB (not timed)
//   document-benchmark open BUNDLE WORKDIR                 prints "open SECONDS": Document.open for writing
//   document-benchmark save BUNDLE WORKDIR [--drop-caches] [--full] [--every-row]
//                                                          prints "save SECONDS REPORT": save() after a one-row
//                                                          change (incremental; --full: savesIncrementally off;
//                                                          --every-row: after every row is rewritten, so every
//                                                          page of the table is written)
//   document-benchmark metadata BUNDLE [COUNT]             prints "metadata MEDIAN_MS ...": Document.metadata(at:)
//   document-benchmark query BUNDLE SQL [CACHE_MIB]        prints "query SECONDS ...": BundleStore (read in place)
//                                                          opened and SQL run, its rows counted
//   document-benchmark query-document BUNDLE WORKDIR SQL   prints "query-document SECONDS ...": the same through a
//                                                          read-only Document.open (the store read in place)
//   document-benchmark query-extract BUNDLE WORKDIR SQL    prints "query-extract SECONDS ...": the same after
//                                                          extracting the bundle (how read-only opens worked before)
//   document-benchmark scan-writable BUNDLE WORKDIR SQL [--drop-caches]
//                                                          prints "scan-writable SECONDS ...": SQL run through a
//                                                          document open for writing (its store served from the
//                                                          bundle), the page cache dropped after the open with
//                                                          --drop-caches; only the query is timed
//   document-benchmark scan-file STORE SQL [--drop-caches] prints "scan-file SECONDS ...": the same SQL on a store
//                                                          file (an extracted working copy), page cache dropped
//                                                          after the open with --drop-caches
//   document-benchmark commits BUNDLE WORKDIR COUNT        prints "commits MS_PER_COMMIT SECONDS ...": COUNT
//                                                          one-row INSERTs, each its own transaction, through a
//                                                          document open for writing (default options); only the
//                                                          commits are timed
//   document-benchmark commits-file STORE COUNT [FULL|EXTRA]
//                                                          prints "commits-file MS_PER_COMMIT SECONDS ...": the same
//                                                          commits on a plain SQLite file through GRDB (rollback
//                                                          journal, DELETE, synchronous = FULL, or EXTRA)
//
// Each timed subcommand prints exactly one line on stdout; its first two fields are the operation and its time.
// `open` times Document.open only (lock, checks, extraction into WORKDIR, opening the store); closing without
// saving, which removes the working copy, is outside the timed span. `save` opens the document first, changes one
// row, and times save() only (pack the working copy, fsync, verify, rename). With --drop-caches it drops the page
// cache between the open and the save, so save reads the working copy cold, as `zip` reads its input after a
// drop. `metadata` calls Document.metadata(at:) COUNT times (default 100) and prints the median and the first call.
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
struct DocumentBenchmark {
    static let usage = """
        usage: document-benchmark make-document BUNDLE MB [WORKDIR]
               document-benchmark open BUNDLE WORKDIR
               document-benchmark save BUNDLE WORKDIR [--drop-caches] [--full] [--every-row]
               document-benchmark metadata BUNDLE [COUNT]
               document-benchmark query BUNDLE SQL [CACHE_MIB]
               document-benchmark query-document BUNDLE WORKDIR SQL
               document-benchmark query-extract BUNDLE WORKDIR SQL
               document-benchmark scan-writable BUNDLE WORKDIR SQL [--drop-caches]
               document-benchmark scan-file STORE SQL [--drop-caches]
               document-benchmark commits BUNDLE WORKDIR COUNT
               document-benchmark commits-file STORE COUNT [FULL|EXTRA]
        """

    static func main() async {
        let arguments = Array(CommandLine.arguments.dropFirst())
        do {
            switch (arguments.first, arguments.count) {
            case ("make-document", 3), ("make-document", 4):
                guard let mib = Int(arguments[2]), mib > 0 else {
                    fail("MB must be a positive integer, not \(arguments[2])\n\(usage)", status: 64)
                }
                try await makeDocument(at: FilePath(arguments[1]), mib: mib,
                                       workingDirectory: arguments.count == 4 ? FilePath(arguments[3]) : nil)
            case ("open", 3):
                try await open(FilePath(arguments[1]), workingDirectory: FilePath(arguments[2]))
            case ("save", 3), ("save", 4), ("save", 5), ("save", 6):
                let flags = Set(arguments.dropFirst(3))
                guard flags.isSubset(of: ["--drop-caches", "--full", "--every-row"]), flags.count == arguments.count - 3
                else {
                    fail(usage, status: 64)
                }
                try await save(FilePath(arguments[1]), workingDirectory: FilePath(arguments[2]),
                               dropCaches: flags.contains("--drop-caches"), full: flags.contains("--full"),
                               everyRow: flags.contains("--every-row"))
            case ("metadata", 2), ("metadata", 3):
                let count = arguments.count == 3 ? Int(arguments[2]) ?? 0 : 100
                guard count > 0 else { fail("COUNT must be a positive integer\n\(usage)", status: 64) }
                try metadata(FilePath(arguments[1]), count: count)
            case ("query", 3), ("query", 4):
                let cache = arguments.count == 4 ? (Int(arguments[3]) ?? 0) << 20 : BundleStore.defaultCacheSize
                guard cache > 0 else { fail("CACHE_MIB must be a positive integer\n\(usage)", status: 64) }
                try query(FilePath(arguments[1]), sql: arguments[2], cacheSize: cache)
            case ("query-document", 4):
                try await queryDocument(FilePath(arguments[1]), workingDirectory: FilePath(arguments[2]),
                                        sql: arguments[3])
            case ("query-extract", 4):
                try await queryExtracting(FilePath(arguments[1]), workingDirectory: FilePath(arguments[2]),
                                          sql: arguments[3])
            case ("scan-writable", 4), ("scan-writable", 5):
                guard arguments.count == 4 || arguments[4] == "--drop-caches" else { fail(usage, status: 64) }
                try await scanWritable(FilePath(arguments[1]), workingDirectory: FilePath(arguments[2]),
                                       sql: arguments[3], dropCaches: arguments.count == 5)
            case ("scan-file", 3), ("scan-file", 4):
                guard arguments.count == 3 || arguments[3] == "--drop-caches" else { fail(usage, status: 64) }
                try await scanFile(FilePath(arguments[1]), sql: arguments[2], dropCaches: arguments.count == 4)
            case ("commits", 4):
                guard let count = Int(arguments[3]), count > 0 else { fail("COUNT must be a positive integer\n\(usage)", status: 64) }
                try await commits(FilePath(arguments[1]), workingDirectory: FilePath(arguments[2]), count: count)
            case ("commits-file", 3), ("commits-file", 4):
                guard let count = Int(arguments[2]), count > 0 else { fail("COUNT must be a positive integer\n\(usage)", status: 64) }
                let synchronous = arguments.count == 4 ? arguments[3].uppercased() : "FULL"
                guard ["FULL", "EXTRA"].contains(synchronous) else { fail("SYNCHRONOUS is FULL or EXTRA\n\(usage)", status: 64) }
                try await commitsFile(FilePath(arguments[1]), count: count, synchronous: synchronous)
            default:
                fail(usage, status: 64)
            }
        } catch {
            fail("document-benchmark: \(error)", status: 1)
        }
    }

    // MARK: Timed operations

    static func open(_ bundle: FilePath, workingDirectory: FilePath) async throws {
        var options = Document.OpenOptions()
        options.workingDirectory = workingDirectory
        let start = ContinuousClock.now
        let document = try await Document.open(at: bundle, options: options)
        let elapsed = ContinuousClock.now - start
        try await document.close(savingChanges: false)
        print("open \(format(seconds(elapsed)))")
    }

    static func save(_ bundle: FilePath, workingDirectory: FilePath, dropCaches: Bool, full: Bool,
                     everyRow: Bool = false) async throws {
        var options = Document.OpenOptions()
        options.workingDirectory = workingDirectory
        options.savesIncrementally = !full
        let document = try await Document.open(at: bundle, options: options)
        let changed = try await document.writer.write { db -> Int in
            if everyRow {
                // > Every row changed in place (same length, other bytes): every page of the table is written.
                try db.execute(sql: "UPDATE item SET kind = upper(kind)")
                return db.changesCount > 0 ? 1 : 0
            }
            try db.execute(sql: "UPDATE item SET body = body || '.' WHERE id = (SELECT min(id) FROM item WHERE kind = 'text')")
            return db.changesCount
        }
        guard changed == 1 else {
            fail("document-benchmark: \(bundle) has no text row to change; make it with make-document", status: 65)
        }
        if dropCaches { try dropPageCache() }
        let start = ContinuousClock.now
        try await document.save()
        let elapsed = ContinuousClock.now - start
        let report = document.lastSave.map { "\($0)" } ?? "none"
        try await document.close(savingChanges: false)
        print("save \(format(seconds(elapsed))) \(report)")
    }

    /// Opens the store in place and runs `sql`, counting its rows and the bytes of its first column.
    static func query(_ bundle: FilePath, sql: String, cacheSize: Int) throws {
        let start = ContinuousClock.now
        let store = try BundleStore(at: bundle, cacheSize: cacheSize)
        let (rows, bytes) = try store.read { db in try run(sql, db) }
        let elapsed = ContinuousClock.now - start
        let stats = store.cacheStatistics
        store.close()
        print("query \(format(seconds(elapsed))) \(store.access.rawValue) rows \(rows) bytes \(bytes) segments \(stats.segmentsLoaded) cache-peak \(stats.peakBytes)")
    }

    /// The same query the way a read-only open worked before it read in place: the bundle extracted (every entry
    /// checked), then the store opened read-only.
    static func queryExtracting(_ bundle: FilePath, workingDirectory: FilePath, sql: String) async throws {
        let start = ContinuousClock.now
        let extracted = try BundleReader(at: bundle).extract(into: workingDirectory.appending("content"))
        var configuration = Configuration()
        configuration.readonly = true
        let queue = try DatabaseQueue(path: extracted.store.string, configuration: configuration)
        let (rows, bytes) = try await queue.read { db in try run(sql, db) }
        let elapsed = ContinuousClock.now - start
        try queue.close()
        print("query-extract \(format(seconds(elapsed))) rows \(rows) bytes \(bytes)")
    }

    /// The same query through a read-only Document.open (its store read in place from the bundle).
    static func queryDocument(_ bundle: FilePath, workingDirectory: FilePath, sql: String) async throws {
        var options = Document.OpenOptions()
        options.isReadOnly = true
        options.workingDirectory = workingDirectory
        let start = ContinuousClock.now
        let document = try await Document.open(at: bundle, options: options)
        let (rows, bytes) = try await document.reader.read { db in try run(sql, db) }
        let elapsed = ContinuousClock.now - start
        try await document.close()
        print("query-document \(format(seconds(elapsed))) rows \(rows) bytes \(bytes)")
    }

    /// A query through a document open for writing, timed alone (the open is not), the page cache dropped first
    /// when asked.
    static func scanWritable(_ bundle: FilePath, workingDirectory: FilePath, sql: String, dropCaches: Bool) async throws {
        var options = Document.OpenOptions()
        options.workingDirectory = workingDirectory
        let document = try await Document.open(at: bundle, options: options)
        if dropCaches { try dropPageCache() }
        let start = ContinuousClock.now
        let (rows, bytes) = try await document.writer.read { db in try run(sql, db) }
        let elapsed = ContinuousClock.now - start
        try await document.close(savingChanges: false)
        print("scan-writable \(format(seconds(elapsed))) rows \(rows) bytes \(bytes)")
    }

    /// The same query on a store file opened with SQLite (an extracted working copy), the page cache dropped first
    /// when asked.
    static func scanFile(_ store: FilePath, sql: String, dropCaches: Bool) async throws {
        let queue = try DatabaseQueue(path: store.string)
        if dropCaches { try dropPageCache() }
        let start = ContinuousClock.now
        let (rows, bytes) = try await queue.read { db in try run(sql, db) }
        let elapsed = ContinuousClock.now - start
        try queue.close()
        print("scan-file \(format(seconds(elapsed))) rows \(rows) bytes \(bytes)")
    }

    /// One row an app commits on its own: a short text, as a note typed and committed.
    static let oneRowInsert = "INSERT INTO item (kind, body) VALUES ('text', ?)"

    /// `count` one-row commits through a document open for writing (default options: its SQLite settings as an app
    /// gets them); only the commits are timed.
    static func commits(_ bundle: FilePath, workingDirectory: FilePath, count: Int) async throws {
        var options = Document.OpenOptions()
        options.workingDirectory = workingDirectory
        let document = try await Document.open(at: bundle, options: options)
        let settings = try await document.writer.writeWithoutTransaction { db in try settingsLine(db) }
        let start = ContinuousClock.now
        for index in 0..<count {
            try await document.writer.write { db in
                try db.execute(sql: oneRowInsert, arguments: ["commit \(index) of a benchmark, a short note"])
            }
        }
        let elapsed = seconds(ContinuousClock.now - start)
        try await document.close(savingChanges: false)
        print("commits \(format(elapsed * 1000 / Double(count))) \(format(elapsed)) count \(count) \(settings)")
    }

    /// The same commits on a plain SQLite file: rollback journal (DELETE), synchronous = `synchronous` (FULL, or
    /// EXTRA: the journal's unlink made durable too, the durability a writable document gives at FULL).
    static func commitsFile(_ store: FilePath, count: Int, synchronous: String) async throws {
        var configuration = Configuration()
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA journal_mode = DELETE; PRAGMA synchronous = \(synchronous)")
        }
        let queue = try DatabaseQueue(path: store.string, configuration: configuration)
        let settings = try await queue.writeWithoutTransaction { db in try settingsLine(db) }
        let start = ContinuousClock.now
        for index in 0..<count {
            try await queue.write { db in
                try db.execute(sql: oneRowInsert, arguments: ["commit \(index) of a benchmark, a short note"])
            }
        }
        let elapsed = seconds(ContinuousClock.now - start)
        try queue.close()
        print("commits-file \(format(elapsed * 1000 / Double(count))) \(format(elapsed)) count \(count) \(settings)")
    }

    /// The connection's journal mode and synchronous setting, as `journal_mode=delete synchronous=2`.
    private static func settingsLine(_ db: Database) throws -> String {
        let mode = try String.fetchOne(db, sql: "PRAGMA journal_mode") ?? "?"
        let synchronous = try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? -1
        return "journal_mode=\(mode) synchronous=\(synchronous)"
    }

    private static func run(_ sql: String, _ db: Database) throws -> (rows: Int, bytes: Int64) {
        var rows = 0
        var bytes: Int64 = 0
        let cursor = try GRDB.Row.fetchCursor(db, sql: sql)
        while let row = try cursor.next() {
            rows += 1
            bytes += row[0] as Int64? ?? 0
        }
        return (rows, bytes)
    }

    static func metadata(_ bundle: FilePath, count: Int) throws {
        var milliseconds: [Double] = []
        milliseconds.reserveCapacity(count)
        for _ in 0..<count {
            let start = ContinuousClock.now
            let metadata = try Document.metadata(at: bundle)
            milliseconds.append(seconds(ContinuousClock.now - start) * 1000)
            guard metadata.store.size > 0 else { fail("document-benchmark: \(bundle) has an empty store", status: 65) }
        }
        let first = milliseconds[0]
        milliseconds.sort()
        let middle = milliseconds.count / 2
        let median = milliseconds.count % 2 == 1 ? milliseconds[middle]
            : (milliseconds[middle - 1] + milliseconds[middle]) / 2
        print("metadata \(format(median)) ms median of \(count) calls; first \(format(first)) ms, max \(format(milliseconds[count - 1])) ms")
    }

    // MARK: The document

    /// Creates a document whose store is about `mib` MiB: rows alternate text (made-up words drawn with a Zipf
    /// law, about 3x compressible by deflate, like prose) and random blobs (incompressible), 64...1536 bytes each,
    /// so about half the store's bytes are each. Deterministic except for the document's ID and dates.
    static func makeDocument(at bundle: FilePath, mib: Int, workingDirectory: FilePath?) async throws {
        if FileManager.default.fileExists(atPath: bundle.string) {
            fail("document-benchmark: \(bundle) already exists", status: 73)
        }
        var options = Document.OpenOptions()
        options.createIfMissing = true
        options.workingDirectory = workingDirectory
        let document = try await Document.open(at: bundle, options: options)
        // The working copy is scratch until the save below: no fsync per batch while it is filled.
        try await document.writer.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA synchronous = OFF")
            try db.execute(sql: "PRAGMA cache_size = -65536")
            try db.execute(sql: "CREATE TABLE item (id INTEGER PRIMARY KEY, kind TEXT NOT NULL, body TEXT, data BLOB)")
        }
        var random = SplitMix64(seed: 20_261_122)
        let corpus = makeCorpus(&random)
        let target = Int64(mib) << 20
        var payload: Int64 = 0
        var storeBytes: Int64 = 0
        while payload < target / 2 || storeBytes < target {
            var rows: [Row] = []
            rows.reserveCapacity(2_000)
            for index in 0..<2_000 {
                let count = Int.random(in: 64...1536, using: &random)
                if index % 2 == 0 {
                    let start = Int.random(in: 0..<(corpus.count - count), using: &random)
                    rows.append(.text(String(decoding: corpus[start..<start + count], as: UTF8.self)))
                } else {
                    var bytes = [UInt8](repeating: 0, count: count)
                    random.fill(&bytes)
                    rows.append(.blob(Data(bytes)))
                }
                payload += Int64(count)
            }
            storeBytes = try await document.writer.write { [rows] db -> Int64 in
                let insert = try db.cachedStatement(sql: "INSERT INTO item (kind, body, data) VALUES (?, ?, ?)")
                for row in rows {
                    switch row {
                    case .text(let text): try insert.execute(arguments: ["text", text, nil])
                    case .blob(let data): try insert.execute(arguments: ["blob", nil, data])
                    }
                }
                let pages = try Int64.fetchOne(db, sql: "PRAGMA page_count") ?? 0
                let pageSize = try Int64.fetchOne(db, sql: "PRAGMA page_size") ?? 0
                return pages * pageSize
            }
        }
        try await document.save()
        try await document.close(savingChanges: false)
        print("make-document \(bundle): store \(storeBytes) bytes (\(storeBytes >> 20) MiB), row payload \(payload) bytes")
    }

    enum Row: Sendable {
        case text(String)
        case blob(Data)
    }

    /// About 10 MB of space-separated made-up words (4000 of them, 2-10 letters) drawn with weights 1/rank.
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

    /// Flushes dirty pages and drops the page cache (Linux, as root); fails loudly when that is not permitted.
    static func dropPageCache() throws {
        sync()
        let control = try FileDescriptor.open("/proc/sys/vm/drop_caches", .writeOnly)
        try control.closeAfter { _ = try control.writeAll("3\n".utf8) }
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    static func format(_ value: Double) -> String {
        String(format: "%.6f", value)
    }

    static func fail(_ message: String, status: Int32) -> Never { BenchmarkSupport.fail(message, status: status) }
}
