import Crypto
import Foundation
import GRDB
import SystemPackage
@testable import ManagedDocument

/// Stores and bundles made in code for tests.
enum Fixtures {
    /// The format version 2 store digest of `bytes` cut at `interval` (FORMAT.md 13.1), computed here on its own
    /// from the spec's words, not by the library; `nil` without an interval.
    static func storeDigest(of bytes: [UInt8], interval: Int64?) -> String? {
        guard let interval, interval > 0 else { return nil }
        var message = Array("MDZ-store-digest-2".utf8)
        withUnsafeBytes(of: UInt64(bytes.count).littleEndian) { message += $0 }
        withUnsafeBytes(of: UInt64(interval).littleEndian) { message += $0 }
        var start = 0
        while start < bytes.count {
            let end = min(bytes.count, start + Int(min(interval, Int64(Int.max / 2))))
            message += Array(SHA256.hash(data: bytes[start..<end]))
            start = end
        }
        return SHA256.hash(data: message).map { String(format: "%02x", $0) }.joined()
    }

    /// Starts `python3 -c script arguments…` in another process and returns once it has printed its first output
    /// (the script prints when it holds the store as the test needs it). The caller ends it.
    static func startPython(_ script: String, _ arguments: [String]) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", script] + arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        _ = pipe.fileHandleForReading.availableData
        return process
    }

    /// Runs `python3 -c script arguments…` in another process to its end (or its death).
    static func runPython(_ script: String, _ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", script] + arguments
        try process.run()
        process.waitUntilExit()
    }

    /// A store with `rows` notes (text, NULLs, integers, reals, blobs) and a tags table, in DELETE journal mode.
    @discardableResult
    static func makeStore(at path: FilePath, rows: Int, blobSize: Int = 300, seed: UInt64 = 1) throws -> FilePath {
        let queue = try DatabaseQueue(path: path.string)
        try queue.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA journal_mode = DELETE")
            try db.execute(sql: "PRAGMA user_version = 7")
            try db.execute(sql: """
                CREATE TABLE note(id INTEGER PRIMARY KEY, title TEXT NOT NULL, body TEXT, score REAL,
                                  count INTEGER, payload BLOB);
                CREATE TABLE tag(id INTEGER PRIMARY KEY, name TEXT UNIQUE, noteID INTEGER REFERENCES note(id));
                CREATE INDEX note_title ON note(title);
                """)
        }
        var generator = SeededGenerator(seed: seed)
        try queue.write { db in
            for index in 0..<rows {
                let body: String? = index % 7 == 0 ? nil : String(repeating: "body \(index) ", count: index % 13 + 1)
                let payload: Data? = index % 5 == 0 ? nil
                    : Data((0..<blobSize).map { _ in UInt8.random(in: 0...255, using: &generator) })
                try db.execute(
                    sql: "INSERT INTO note(title, body, score, count, payload) VALUES (?, ?, ?, ?, ?)",
                    arguments: ["Title \(index) — ünïcødé", body, index % 3 == 0 ? nil : Double(index) / 7,
                                index, payload])
                if index % 10 == 0 {
                    try db.execute(sql: "INSERT INTO tag(name, noteID) VALUES (?, ?)", arguments: ["tag\(index)", index + 1])
                }
            }
        }
        try queue.close()
        return path
    }

    /// Per-table digests of every row, in rowid order, as SQLite reads them.
    static func rowDigests(of path: FilePath) throws -> [String: String] {
        var configuration = Configuration()
        configuration.readonly = true
        let queue = try DatabaseQueue(path: path.string, configuration: configuration)
        defer { try? queue.close() }  // Squash close error of a read-only queue.
        return try queue.read { db in
            let tables = try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            var digests: [String: String] = [:]
            for table in tables {
                var hasher = SHA256()
                let rows = try Row.fetchCursor(db, sql: "SELECT * FROM \(table.quotedDatabaseIdentifier) ORDER BY rowid")
                var count = 0
                while let row = try rows.next() {
                    count += 1
                    for (column, value) in row {
                        hasher.update(data: Array("\(column)=\(value.databaseValue.description)\u{1F}".utf8))
                    }
                    hasher.update(data: [0x1E])
                }
                digests[table] = "\(count):" + hasher.finalize().map { String(format: "%02x", $0) }.joined()
            }
            return digests
        }
    }

    /// A bundle holding a store of `rows` rows, plus optional external data and additional content.
    @discardableResult
    static func makeBundle(at path: FilePath, rows: Int = 50, withFolders: Bool = false,
                           options: WritingOptions = WritingOptions()) throws -> DocumentMetadata {
        let folder = path.removingLastComponent()
        let work = folder.appending(".fixture-\(UUID().uuidString)")
        try FileManager.default.createDirectory(atPath: work.string, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: work.string) }  // Squash cleanup error.
        let store = try makeStore(at: work.appending("store.sqlite"), rows: rows)
        var content = BundleContent(store: store)
        if withFolders {
            let external = work.appending("_EXTERNAL_DATA")
            let additional = work.appending("AdditionalContent")
            try FileManager.default.createDirectory(atPath: external.string, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: additional.appending("images").string,
                                                    withIntermediateDirectories: true)
            var generator = SeededGenerator(seed: 9)
            for index in 0..<3 {
                let bytes = Data((0..<(5_000 * (index + 1))).map { _ in UInt8.random(in: 0...255, using: &generator) })
                try bytes.write(to: URL(fileURLWithPath: external.appending("\(UUID().uuidString)").string))
            }
            try Data("hello".utf8).write(to: URL(fileURLWithPath: additional.appending("readme.txt").string))
            try Data(repeating: 7, count: 40_000).write(
                to: URL(fileURLWithPath: additional.appending("images/pic.raw").string))
            content.externalData = external
            content.additionalContent = additional
        }
        return try BundleWriter.write(content, metadata: DocumentMetadata(), to: path, options: options)
    }

    static func bytes(of path: FilePath) throws -> [UInt8] {
        Array(try Data(contentsOf: URL(fileURLWithPath: path.string)))
    }

    static func write(_ bytes: [UInt8], to path: FilePath) throws {
        try Data(bytes).write(to: URL(fileURLWithPath: path.string))
    }
}

/// A deterministic generator (SplitMix64), so fixtures are the same on every run.
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

extension Fixtures {
    /// Row digests of a store as SQLite itself reads it with its sidecars: the files are copied to a scratch
    /// folder and opened read-write there, so SQLite replays a `-wal` or rolls back a hot `-journal` in the copy.
    static func digestsAsSQLiteReads(_ store: FilePath) throws -> [String: String] {
        let scratch = FilePath(FileManager.default.temporaryDirectory.appendingPathComponent("oracle-\(UUID().uuidString)").path)
        try FileManager.default.createDirectory(atPath: scratch.string, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: scratch.string) }  // Squash cleanup error.
        let copy = scratch.appending("store")
        for suffix in ["", "-wal", "-journal"] where FileManager.default.fileExists(atPath: store.string + suffix) {
            try FileManager.default.copyItem(atPath: store.string + suffix, toPath: copy.string + suffix)
        }
        let queue = try DatabaseQueue(path: copy.string)
        _ = try queue.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_master") }
        try queue.close()
        return try rowDigests(of: copy)
    }

    /// SHA-256 of every file below a folder (or of one file), by relative path.
    static func fileHashes(_ root: FilePath) throws -> [String: String] {
        var result: [String: String] = [:]
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: root.string, isDirectory: &isDirectory) else { return [:] }
        if !isDirectory.boolValue { return [root.lastComponent!.string: try FileDigest(of: root).sha256] }
        let enumerator = FileManager.default.enumerator(atPath: root.string)
        while let relative = enumerator?.nextObject() as? String {
            let path = root.appending(relative)
            if FileSystem.isRegularFile(path) { result[relative] = try FileDigest(of: path).sha256 }
        }
        return result
    }

    /// Extracts a bundle's store into a scratch folder and returns its row digests.
    static func bundleDigests(_ bundle: FilePath) throws -> [String: String] {
        let scratch = FilePath(FileManager.default.temporaryDirectory.appendingPathComponent("bundle-\(UUID().uuidString)").path)
        defer { try? FileManager.default.removeItem(atPath: scratch.string) }  // Squash cleanup error.
        let extracted = try BundleReader(at: bundle).extract(into: scratch)
        return try rowDigests(of: extracted.store)
    }
}
