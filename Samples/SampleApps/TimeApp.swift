import Foundation
import GRDB
import ManagedDocument
import SystemPackage

/// The time-tracking app's model (`minimalTime.sqlite`: events and tags), with MTMigration-style compatibility
/// levels: the app supports level 1, and the fix-up for level 1 gives every Event and Tag a GUID, so that devices can
/// later sync them. It runs once per document, when the document's level is below 1; afterwards the GUIDs never
/// change (a sync peer keys on them), and the app itself gives new rows theirs.
public enum TimeApp {
    public static let modelName = "minimalTime"

    public static var migrator: DocumentMigrator {
        var migrator = DocumentMigrator(modelName: modelName, modelVersion: "1", compatibilityLevel: 1)
        migrator.registerAdditiveSchema("minimalTime-guid-columns", [
            .column("ZGUID", "VARCHAR", in: "ZEVENT"),
            .column("ZGUID", "VARCHAR", in: "ZTAG"),
        ])
        migrator.registerFixup(level: 1, "minimalTime-level-1-guids") { db in
            for table in ["ZEVENT", "ZTAG"] {
                let keys = try Int64.fetchAll(db, sql: "SELECT Z_PK FROM \(table) WHERE ZGUID IS NULL ORDER BY Z_PK")
                let update = try db.makeStatement(sql: "UPDATE \(table) SET ZGUID = ? WHERE Z_PK = ?")
                for key in keys {
                    try update.execute(arguments: [UUID().uuidString, key])
                }
                try db.execute(sql: "CREATE UNIQUE INDEX IF NOT EXISTS \(table)_ZGUID ON \(table)(ZGUID)")
            }
        }
        return migrator
    }

    public struct Summary: Codable, Sendable, Equatable {
        public var events: Int
        public var tags: Int
        public var withoutGUID: Int
        /// Tracked hours per tag name ("untagged" for events without a tag), rounded to 0.01.
        public var hoursByTag: [String: Double]
    }

    public static func summary(_ db: Database) throws -> Summary {
        var hours: [String: Double] = [:]
        for row in try Row.fetchAll(db, sql: """
            SELECT ifnull(t.ZNAME, 'untagged'), sum(e.ZEND - e.ZSTART) FROM ZEVENT e LEFT JOIN ZTAG t ON t.Z_PK = e.ZTAG
            GROUP BY 1
            """) {
            let seconds: Double = row[1]
            hours[row[0]] = (seconds / 36).rounded() / 100
        }
        let withoutGUID = try ["ZEVENT", "ZTAG"].reduce(0) { total, table in
            let hasColumn = try db.columns(in: table).contains { $0.name == "ZGUID" }
            let count = hasColumn ? try Int.fetchOne(db, sql: "SELECT count(*) FROM \(table) WHERE ZGUID IS NULL") ?? 0
                : try Int.fetchOne(db, sql: "SELECT count(*) FROM \(table)") ?? 0
            return total + count
        }
        return Summary(events: try Int.fetchOne(db, sql: "SELECT count(*) FROM ZEVENT") ?? 0,
                       tags: try Int.fetchOne(db, sql: "SELECT count(*) FROM ZTAG") ?? 0,
                       withoutGUID: withoutGUID, hoursByTag: hours)
    }

    /// Records an event the way the app at level 1 does: with its own GUID.
    public static func addEvent(_ title: String, start: Date, end: Date, _ db: Database) throws {
        let pk = try CoreDataKeys.next(entity: 1, db)
        try db.execute(sql: """
            INSERT INTO ZEVENT(Z_PK, Z_ENT, Z_OPT, ZTITLE, ZSTART, ZEND, ZGUID) VALUES (?, 1, 1, ?, ?, ?, ?)
            """, arguments: [pk, title, start.timeIntervalSinceReferenceDate, end.timeIntervalSinceReferenceDate,
                             UUID().uuidString])
    }
}
