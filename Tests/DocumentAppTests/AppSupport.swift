import Crypto
import Foundation
import GRDB
import ManagedDocument
import SystemPackage
import TestSupport

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

    /// - Parameter rowIDs: whether each row's rowid counts too (not across a VACUUM, which may renumber them).
    init(_ db: Database, rowIDs: Bool = false) throws {
        schema = try String.fetchAll(db, sql: "SELECT type || ' ' || name || ': ' || sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name")
        userVersion = try Int.fetchOne(db, sql: "PRAGMA user_version") ?? 0
        tables = [:]
        let names = try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
        for table in names {
            var hasher = SHA256()
            var count = 0
            let rows = try Row.fetchCursor(db, sql: "SELECT \(rowIDs ? "rowid AS \"rowid:\", " : "")* FROM \(table.quotedDatabaseIdentifier) ORDER BY rowid")
            while let row = try rows.next() {
                count += 1
                for (column, value) in row { hashValue(value.databaseValue, named: column, into: &hasher) }
                hasher.update(data: [0x1E])
            }
            tables[table] = "\(count):" + hasher.finalize().map { String(format: "%02x", $0) }.joined()
        }
    }

    var description: String { "tables \(tables.keys.sorted()) user_version \(userVersion)" }

    /// What differs from `other`, in a line.
    func difference(from other: StoreContent) -> String {
        var lines: [String] = []
        if schema != other.schema {
            lines.append("schema: \(Set(schema).subtracting(other.schema).sorted()) here, \(Set(other.schema).subtracting(schema).sorted()) expected")
        }
        if userVersion != other.userVersion { lines.append("user_version \(userVersion), expected \(other.userVersion)") }
        for name in Set(tables.keys).union(other.tables.keys).sorted() where tables[name] != other.tables[name] {
            lines.append("\(name): \(tables[name] ?? "absent"), expected \(other.tables[name] ?? "absent")")
        }
        return lines.isEmpty ? "equal" : lines.joined(separator: "; ")
    }
}

/// Feeds a column's name and value into `hasher`: the value's type and all its bytes (a blob's bytes themselves, not
/// its description, which names only its length).
func hashValue(_ value: DatabaseValue, named column: String, into hasher: inout SHA256) {
    hasher.update(data: Array(column.utf8) + [0x1F])
    switch value.storage {
    case .null: hasher.update(data: [0])
    case .int64(let int): withUnsafeBytes(of: int.littleEndian) { hasher.update(data: [1] + $0) }
    case .double(let double): withUnsafeBytes(of: double.bitPattern.littleEndian) { hasher.update(data: [2] + $0) }
    case .string(let string): hasher.update(data: [3] + Array("\(string.utf8.count):".utf8) + Array(string.utf8))
    case .blob(let data):
        hasher.update(data: [4] + Array("\(data.count):".utf8))
        hasher.update(data: data)
    }
}

/// The payload of `notes-app journal` entry `id` (NotesApp.journalPayload).
func journalPayload(_ id: Int) -> Data {
    Data((0..<1024).map { UInt8(truncatingIfNeeded: ($0 / 8) &* 7 &+ id) })
}

/// The journal entries `notes-app journal` wrote in a store: their ids, in order, once each is checked against its
/// text and payload; `nil` when one does not match.
func journalIDs(_ db: Database) throws -> [Int]? {
    guard try db.tableExists("entry") else { return [] }
    var ids: [Int] = []
    for row in try Row.fetchAll(db, sql: "SELECT id, text, payload FROM entry ORDER BY id") {
        let id: Int = row["id"]
        guard row["text"] == "entry \(id)", row["payload"] == journalPayload(id) else { return nil }
        ids.append(id)
    }
    return ids
}

/// The working copies' folder `notes-app` uses when run by `NotesApp` (TestSupport) in `directory` (its default,
/// under XDG_STATE_HOME).
func childWorkingDirectory(_ directory: FilePath) -> FilePath {
    directory.appending("state").appending("ManagedDocument")
}

/// Text that deflates as an app's rows do (words), different for every row.
func words(_ count: Int, _ generator: inout SeededGenerator) -> String {
    let vocabulary = ["meeting", "notes", "budget", "garden", "river", "invoice", "draft", "summer", "kitchen",
                      "project", "review", "travel", "market", "letter", "window", "coffee", "signal", "paper"]
    return (0..<count).map { _ in vocabulary[Int(generator.next() % UInt64(vocabulary.count))] + "\(generator.next() % 97)" }
        .joined(separator: " ")
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

/// Flips one byte in the middle of `bundle`'s store's compressed data, in place: its restart points and digests stay
/// as they were, so the damage is found only where the segment is read.
func flipStoreByte(in bundle: FilePath) throws {
    let reader = try BundleReader(at: bundle)
    guard let entry = reader.entries.first(where: { $0.name == "StoreContent/persistentStore" }) else {
        throw DamageNotMade(reason: "the test bundle has no store")
    }
    // > The entry's name first appears in its local header, just before its data.
    let bytes = try Data(contentsOf: URL(fileURLWithPath: bundle.string))
    guard let name = bytes.range(of: Data(entry.name.utf8)) else {
        throw DamageNotMade(reason: "the store's local header was not found")
    }
    let handle = try FileHandle(forUpdating: URL(fileURLWithPath: bundle.string))
    defer { try? handle.close() }  // Squash close error of a test's file.
    let target = UInt64(name.upperBound) + 200 + entry.compressedSize / 2
    try handle.seek(toOffset: target)
    let byte = try handle.read(upToCount: 1)?.first ?? 0
    try handle.seek(toOffset: target)
    try handle.write(contentsOf: Data([byte ^ 0x55]))
}

/// Why ``flipStoreByte(in:)`` could not damage the bundle it was given.
struct DamageNotMade: Error, CustomStringConvertible {
    var reason: String
    var description: String { "the test could not damage its bundle: \(reason)" }
}
