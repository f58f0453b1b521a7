import Crypto
import Foundation
import GRDB
import SystemPackage
import TestSupport
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

/// What this target's tests read of stores and bundles, beside the stores and bundles TestSupport's `Fixtures` makes.
extension Fixtures {
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
