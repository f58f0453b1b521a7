import Crypto
import Foundation
import GRDB
import ManagedDocument
import SystemPackage

/// What an app passes: a document created when missing, working copies in a folder of the test's own.
func appOptions(_ folder: FilePath) -> Document.OpenOptions {
    var options = Document.OpenOptions()
    options.createIfMissing = true
    options.workingDirectory = folder.appending("working")
    return options
}

/// The store of a bundle, as a digest per table (row count and SHA-256 of every value, in rowid order), plus
/// `user_version` and the schema: what a save must carry, read through a read-only open like any app's.
func bundleContent(_ bundle: FilePath, folder: FilePath) async throws -> StoreContent {
    var options = appOptions(folder)
    options.isReadOnly = true
    options.createIfMissing = false
    let document = try await Document.open(at: bundle, options: options)
    let content = try await document.reader.read { db in try StoreContent(db) }
    try await document.close()
    return content
}

struct StoreContent: Equatable, CustomStringConvertible {
    var tables: [String: String]
    var userVersion: Int
    var schema: [String]

    init(_ db: Database) throws {
        schema = try String.fetchAll(db, sql: "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name")
        userVersion = try Int.fetchOne(db, sql: "PRAGMA user_version") ?? 0
        tables = [:]
        let names = try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
        for table in names {
            var hasher = SHA256()
            var count = 0
            let rows = try Row.fetchCursor(db, sql: "SELECT * FROM \(table.quotedDatabaseIdentifier) ORDER BY rowid")
            while let row = try rows.next() {
                count += 1
                for (column, value) in row {
                    // > A blob's description names only its length: its bytes are hashed themselves.
                    if case .blob(let data) = value.databaseValue.storage {
                        hasher.update(data: Array("\(column)=blob \(data.count):".utf8))
                        hasher.update(data: data)
                        hasher.update(data: [0x1F])
                    } else {
                        hasher.update(data: Array("\(column)=\(value.databaseValue)\u{1F}".utf8))
                    }
                }
                hasher.update(data: [0x1E])
            }
            tables[table] = "\(count):" + hasher.finalize().map { String(format: "%02x", $0) }.joined()
        }
    }

    var description: String { "tables \(tables.keys.sorted()) user_version \(userVersion)" }
}

/// The permission bits and owner of a file (`lstat`).
func mode(of path: FilePath) throws -> (permissions: UInt32, owner: UInt32, isLink: Bool) {
    let attributes = try FileManager.default.attributesOfItem(atPath: path.string)
    let permissions = (attributes[.posixPermissions] as? NSNumber)?.uint32Value ?? 0
    let owner = (attributes[.ownerAccountID] as? NSNumber)?.uint32Value ?? 0
    return (permissions, owner, attributes[.type] as? FileAttributeType == .typeSymbolicLink)
}

/// This process's umask, read without changing it (`/proc/self/status`).
func currentUmask() -> UInt32 {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
          let line = status.split(separator: "\n").first(where: { $0.hasPrefix("Umask:") }),
          let value = UInt32(line.dropFirst("Umask:".count).trimmingCharacters(in: .whitespaces), radix: 8)
    else { return 0o022 }
    return value
}

/// A small deterministic generator, so that a failing sequence can be replayed from its seed.
struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed == 0 ? 0x9E37_79B9_7F4A_7C15 : seed }
    mutating func next() -> UInt64 {
        state ^= state << 13
        state ^= state >> 7
        state ^= state << 17
        return state
    }
}
