import Foundation
import GRDB

/// Writes the tables Core Data's SQLite store keeps: `Z_PRIMARYKEY`, `Z_METADATA` (with a binary-plist `Z_PLIST`),
/// `Z_MODELCACHE`, and one `Z<ENTITY>` table per entity with `Z_PK`, `Z_ENT`, `Z_OPT` and `Z<ATTRIBUTE>` columns.
public struct CoreDataLayout: Sendable {
    public struct Entity: Sendable {
        public var name: String
        /// Column definitions after the three bookkeeping columns, e.g. `"ZNAME VARCHAR"`.
        public var columns: [String]
        public init(name: String, columns: [String]) {
            self.name = name
            self.columns = columns
        }
        public var table: String { "Z" + name.uppercased() }
    }

    public var entities: [Entity]
    public var storeUUID: String
    public var modelVersionIdentifier: String
    public var frameworkVersion: Int = 1_251
    /// Extra app keys stored in the metadata plist.
    public var appMetadata: [String: String] = [:]

    public init(entities: [Entity], storeUUID: String, modelVersionIdentifier: String) {
        self.entities = entities
        self.storeUUID = storeUUID
        self.modelVersionIdentifier = modelVersionIdentifier
    }

    /// The entity number (`Z_ENT`) of an entity, 1-based in declaration order.
    public func entityNumber(_ name: String) -> Int {
        (entities.firstIndex { $0.name == name } ?? 0) + 1
    }

    public func createTables(_ db: Database) throws {
        for entity in entities {
            let columns = ["Z_PK INTEGER PRIMARY KEY", "Z_ENT INTEGER", "Z_OPT INTEGER"] + entity.columns
            try db.execute(sql: "CREATE TABLE \(entity.table) ( \(columns.joined(separator: ", ")) )")
        }
        try db.execute(sql: "CREATE TABLE Z_PRIMARYKEY (Z_ENT INTEGER PRIMARY KEY, Z_NAME VARCHAR, Z_SUPER INTEGER, Z_MAX INTEGER)")
        try db.execute(sql: "CREATE TABLE Z_METADATA (Z_VERSION INTEGER PRIMARY KEY, Z_UUID VARCHAR(255), Z_PLIST BLOB)")
        try db.execute(sql: "CREATE TABLE Z_MODELCACHE (Z_CONTENT BLOB)")
        for (index, entity) in entities.enumerated() {
            try db.execute(sql: "INSERT INTO Z_PRIMARYKEY(Z_ENT, Z_NAME, Z_SUPER, Z_MAX) VALUES (?, ?, 0, 0)",
                           arguments: [index + 1, entity.name])
        }
        var hashes: [String: Data] = [:]
        for entity in entities {
            // A stable stand-in for Core Data's 32-byte entity version hash.
            var bytes = [UInt8](repeating: 0, count: 32)
            for (index, byte) in (entity.name + entity.columns.joined()).utf8.enumerated() {
                bytes[index % 32] = bytes[index % 32] &* 31 &+ byte
            }
            hashes[entity.name] = Data(bytes)
        }
        var plist: [String: Any] = [
            "NSStoreType": "SQLite",
            "NSPersistenceFrameworkVersion": frameworkVersion,
            "NSStoreModelVersionIdentifiers": [modelVersionIdentifier],
            "NSStoreModelVersionHashesVersion": 3,
            "NSStoreModelVersionHashes": hashes,
            "_NSAutoVacuumLevel": "2",
        ]
        for (key, value) in appMetadata { plist[key] = value }
        let data = try PropertyListSerialization.data(fromPropertyList: plist, format: .binary, options: 0)
        try db.execute(sql: "INSERT INTO Z_METADATA(Z_VERSION, Z_UUID, Z_PLIST) VALUES (1, ?, ?)",
                       arguments: [storeUUID, data])
        try db.execute(sql: "INSERT INTO Z_MODELCACHE(Z_CONTENT) VALUES (?)", arguments: [Data(repeating: 0x5A, count: 256)])
    }

    /// Inserts a row for an entity and bumps `Z_PRIMARYKEY.Z_MAX`; returns its `Z_PK`.
    @discardableResult
    public func insert(_ db: Database, _ entityName: String, _ values: [String: (any DatabaseValueConvertible)?]) throws -> Int64 {
        let entity = entities.first { $0.name == entityName }!
        let number = entityNumber(entityName)
        let next = (try Int64.fetchOne(db, sql: "SELECT Z_MAX FROM Z_PRIMARYKEY WHERE Z_ENT = ?", arguments: [number]) ?? 0) + 1
        let names = ["Z_PK", "Z_ENT", "Z_OPT"] + values.keys.sorted()
        var arguments: [(any DatabaseValueConvertible)?] = [next, number, 1]
        for key in values.keys.sorted() { arguments.append(values[key]!) }
        let placeholders = Array(repeating: "?", count: names.count).joined(separator: ", ")
        try db.execute(sql: "INSERT INTO \(entity.table) (\(names.joined(separator: ", "))) VALUES (\(placeholders))",
                       arguments: StatementArguments(arguments))
        try db.execute(sql: "UPDATE Z_PRIMARYKEY SET Z_MAX = ? WHERE Z_ENT = ?", arguments: [next, number])
        return next
    }
}

/// Core Data's reference date: timestamps are seconds since 2001-01-01T00:00:00Z.
public func coreDataTimestamp(year: Int, month: Int, day: Int, hour: Int = 12, minute: Int = 0) -> Double {
    var components = DateComponents()
    components.calendar = Calendar(identifier: .gregorian)
    components.timeZone = TimeZone(identifier: "UTC")
    components.year = year
    components.month = month
    components.day = day
    components.hour = hour
    components.minute = minute
    return components.date!.timeIntervalSinceReferenceDate
}
