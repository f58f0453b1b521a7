import Foundation
import GRDB
import ManagedDocument
import SystemPackage

/// The taste-tracking app's model: restaurants and dishes (version 1, the legacy `TasteB.sqlite`), then categories.
///
/// Version 2 evolved the model the way Core Data's lightweight migration does — additively: a `Category` entity,
/// a `category` relationship on `Restaurant`, a `favourite` attribute on `Dish` (default 0). Compatibility level 1
/// is a run-once fix-up: every restaurant that exists at that moment goes into a new "Restaurants" category. It must
/// run once per document, never again on later launches (a second "Restaurants" category, or restaurants the user
/// moved out of it put back, would be bugs a user sees).
public enum TasteApp {
    public static let modelName = "TasteB"
    public static let categoryName = "Restaurants"
    /// Core Data's entity number for `Category` (Restaurant is 1, Dish is 2).
    static let categoryEntity = 3

    public static var migrator: DocumentMigrator {
        var migrator = DocumentMigrator(modelName: modelName, modelVersion: "2", compatibilityLevel: 1)
        migrator.registerAdditiveSchema("TasteB-2-categories", [
            .table("ZCATEGORY", columns: [.init("Z_ENT", "INTEGER"), .init("Z_OPT", "INTEGER"), .init("ZNAME", "VARCHAR")]),
            .column("ZCATEGORY", "INTEGER", in: "ZRESTAURANT"),
            .column("ZFAVOURITE", "INTEGER", in: "ZDISH", default: "0"),
        ])
        migrator.registerFixup(level: 1, "TasteB-restaurants-category") { db in
            try CoreDataKeys.register(entity: "Category", number: categoryEntity, db)
            let pk = try CoreDataKeys.next(entity: categoryEntity, db)
            try db.execute(sql: "INSERT INTO ZCATEGORY(Z_PK, Z_ENT, Z_OPT, ZNAME) VALUES (?, ?, 1, ?)",
                           arguments: [pk, categoryEntity, categoryName])
            try db.execute(sql: "UPDATE ZRESTAURANT SET ZCATEGORY = ?, Z_OPT = Z_OPT + 1 WHERE ZCATEGORY IS NULL",
                           arguments: [pk])
        }
        return migrator
    }

    /// What the app shows: restaurants and dishes, and how many restaurants each category holds.
    public struct Summary: Codable, Sendable, Equatable {
        public var restaurants: Int
        public var dishes: Int
        public var categories: [String: Int]
        public var uncategorised: Int

        public init(restaurants: Int, dishes: Int, categories: [String: Int], uncategorised: Int) {
            self.restaurants = restaurants
            self.dishes = dishes
            self.categories = categories
            self.uncategorised = uncategorised
        }
    }

    public static func summary(_ db: Database) throws -> Summary {
        let categories = try Row.fetchAll(db, sql: """
            SELECT c.ZNAME, count(r.Z_PK) FROM ZCATEGORY c LEFT JOIN ZRESTAURANT r ON r.ZCATEGORY = c.Z_PK
            GROUP BY c.Z_PK ORDER BY c.ZNAME
            """)
        var counts: [String: Int] = [:]
        for row in categories {
            let name: String = row[0]
            counts[name, default: 0] += row[1]
        }
        return Summary(
            restaurants: try Int.fetchOne(db, sql: "SELECT count(*) FROM ZRESTAURANT") ?? 0,
            dishes: try Int.fetchOne(db, sql: "SELECT count(*) FROM ZDISH") ?? 0,
            categories: counts,
            uncategorised: try Int.fetchOne(db, sql: "SELECT count(*) FROM ZRESTAURANT WHERE ZCATEGORY IS NULL") ?? 0)
    }

    /// Adds a restaurant the way version 2 of the app does (in the category it is given, or none).
    public static func addRestaurant(_ name: String, city: String, category: String?, _ db: Database) throws {
        var categoryPK: Int64?
        if let category {
            categoryPK = try Int64.fetchOne(db, sql: "SELECT Z_PK FROM ZCATEGORY WHERE ZNAME = ?", arguments: [category])
        }
        let pk = try CoreDataKeys.next(entity: 1, db)
        try db.execute(sql: "INSERT INTO ZRESTAURANT(Z_PK, Z_ENT, Z_OPT, ZNAME, ZCITY, ZCATEGORY) VALUES (?, 1, 1, ?, ?, ?)",
                       arguments: [pk, name, city, categoryPK])
    }
}

/// Core Data's primary-key bookkeeping (`Z_PRIMARYKEY`), kept right so that the old app's framework could still
/// read a store the new model wrote.
enum CoreDataKeys {
    static func register(entity name: String, number: Int, _ db: Database) throws {
        try db.execute(sql: "INSERT OR IGNORE INTO Z_PRIMARYKEY(Z_ENT, Z_NAME, Z_SUPER, Z_MAX) VALUES (?, ?, 0, 0)",
                       arguments: [number, name])
    }

    /// The next `Z_PK` for an entity, taken (Z_MAX raised).
    static func next(entity number: Int, _ db: Database) throws -> Int64 {
        let next = (try Int64.fetchOne(db, sql: "SELECT Z_MAX FROM Z_PRIMARYKEY WHERE Z_ENT = ?", arguments: [number]) ?? 0) + 1
        try db.execute(sql: "UPDATE Z_PRIMARYKEY SET Z_MAX = ? WHERE Z_ENT = ?", arguments: [next, number])
        return next
    }
}
