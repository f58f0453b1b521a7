import Foundation
import GRDB
@_spi(Core) import MDZCore

/// Reads what Core Data recorded about a store in its `Z_METADATA` table.
///
/// `Z_PLIST` is a binary property list with `NSStoreType`, `NSPersistenceFrameworkVersion`,
/// `NSStoreModelVersionIdentifiers` and `NSStoreModelVersionHashes` (entity name to hash data). Real stores keep
/// the store UUID in the `Z_UUID` column, not in the plist (`NSStoreUUID` is read from the plist only as a
/// fallback). Other keys an app stored there stay in the store untouched; only their names are recorded.
enum CoreDataMetadata {
    /// Whether the database has Core Data's bookkeeping tables.
    static func isCoreDataStore(_ db: Database) throws -> Bool {
        let count = try Int.fetchOne(db, sql: """
            SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('Z_METADATA', 'Z_PRIMARYKEY')
            """) ?? 0
        return count == 2
    }

    /// Whether `data` starts as a binary (`bplist00`) or XML property list does: anything else is not handed to
    /// Foundation, whose parser leaks its error object for every input it refuses (found by fuzzing).
    static func looksLikePropertyList(_ data: Data) -> Bool {
        if data.starts(with: Array("bplist00".utf8)) { return true }
        let text = data.prefix(64).drop { $0 == 0x20 || $0 == 0x09 || $0 == 0x0A || $0 == 0x0D || $0 == 0xEF || $0 == 0xBB || $0 == 0xBF }
        return text.first == UInt8(ascii: "<")
    }

    /// Decodes `Z_METADATA`; a plist that cannot be decoded leaves those fields empty rather than failing.
    static func read(_ db: Database) throws -> DocumentMetadata.CoreDataInfo {
        let columns = try db.columns(in: "Z_METADATA").map { $0.name.uppercased() }
        var info = DocumentMetadata.CoreDataInfo(storeUUID: nil, storeType: nil, modelVersionIdentifiers: [],
                                                 modelVersionHashes: [:], frameworkVersion: nil,
                                                 metadataVersion: nil, otherKeys: [])
        let select = ["Z_VERSION", "Z_UUID", "Z_PLIST"].map { columns.contains($0) ? $0 : "NULL" }
        guard let row = try Row.fetchOne(db, sql: "SELECT \(select.joined(separator: ", ")) FROM Z_METADATA LIMIT 1")
        else { return info }
        // > Untrusted columns: a value of another type than Core Data writes is recorded as absent, never trusted to
        // > convert (GRDB's typed subscript traps on a value it cannot decode; found by fuzzing).
        info.metadataVersion = Int.fromDatabaseValue(row[0] as DatabaseValue)
        info.storeUUID = String.fromDatabaseValue(row[1] as DatabaseValue)
        guard let data = Data.fromDatabaseValue(row[2] as DatabaseValue), Self.looksLikePropertyList(data),
              let plist = try? PropertyListSerialization.propertyList(from: data, format: nil) as? [String: Any]
        else { return info }  // an unreadable plist is recorded as absent: the table itself is kept in the store
        info.storeType = plist["NSStoreType"] as? String
        if let version = plist["NSPersistenceFrameworkVersion"] {
            info.frameworkVersion = "\(version)"
        }
        if let identifiers = plist["NSStoreModelVersionIdentifiers"] as? [Any] {
            info.modelVersionIdentifiers = identifiers.map { "\($0)" }
        }
        if let hashes = plist["NSStoreModelVersionHashes"] as? [String: Any] {
            for (entity, value) in hashes {
                if let data = value as? Data { info.modelVersionHashes[entity] = data.base64EncodedString() }
            }
        }
        if info.storeUUID == nil { info.storeUUID = plist["NSStoreUUID"] as? String }
        let known: Set<String> = ["NSStoreType", "NSPersistenceFrameworkVersion", "NSStoreModelVersionIdentifiers",
                                  "NSStoreModelVersionHashes", "NSStoreUUID"]
        info.otherKeys = plist.keys.filter { !known.contains($0) }.sorted()
        return info
    }
}
