import Crypto
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import GRDB
@_spi(Core) import MDZCore

/// An app's data model and its ordered migrations, each run exactly once per document.
///
/// Three kinds of migration are first-class:
/// - **additive** (Core Data's lightweight migration): ``registerAdditiveSchema(_:_:)`` declares tables and columns
///   that must exist; missing ones are created without hand-written SQL. Nothing is ever dropped.
/// - **data-transforming** (Core Data's custom migration): ``registerMigration(_:checksum:_:)`` runs any SQL, e.g.
///   turning an archived array in a blob into rows.
/// - **run-once fix-ups by compatibility level** (MTMigration style): ``registerFixup(level:_:_:)`` runs when the
///   document's level is below `level` and the app supports it, then raises the document's level.
///
/// ```swift
/// var migrator = DocumentMigrator(modelName: "TasteB", modelVersion: "2", compatibilityLevel: 1)
/// migrator.registerAdditiveSchema("v2-categories", [
///     .table("ZCATEGORY", columns: [.init("ZNAME", "TEXT")]),
///     .column("ZCATEGORY", "INTEGER", in: "ZRESTAURANT"),
/// ])
/// migrator.registerFixup(level: 1, "restaurants-category") { db in
///     try db.execute(sql: "INSERT INTO ZCATEGORY(ZNAME) VALUES ('Restaurants')")
///     try db.execute(sql: "UPDATE ZRESTAURANT SET ZCATEGORY = last_insert_rowid()")
/// }
/// var options = Document.OpenOptions()
/// options.migrations = migrator
/// ```
///
/// Each migration runs in its own transaction on the document's working copy and is recorded in the same
/// transaction in the store's `managed_document_migrations` table (so an extracted store still knows), and in the
/// metadata's `model.migrations`. Identifiers are frozen: a migration that has shipped is never modified.
public struct DocumentMigrator: Sendable {
    /// One registered migration.
    public struct Migration: Sendable {
        /// What kind of change a migration makes (the Migrations article says how each is run).
        public enum Kind: Sendable, Equatable {
            /// Adds tables, columns or indexes; older readers ignore them.
            case additive
            /// Rewrites existing data.
            case transforming
            /// Repairs data and raises the document's compatibility level to `level`.
            case fixup(level: Int)
        }
        /// The migration's identifier, unique within the migrator and frozen once shipped.
        public let identifier: String
        /// What kind of change it makes.
        public let kind: Kind
        /// The SHA-256 of its SQL, for migrations read from files.
        public let checksum: String?
        let body: @Sendable (Database) throws -> Void
    }

    /// A piece of an additive schema.
    public enum SchemaChange: Sendable, Equatable {
        /// A table with its columns; an `INTEGER PRIMARY KEY` named `primaryKey` comes first.
        case table(String, primaryKey: String = "Z_PK", columns: [Column])
        /// A column added to an existing table, with an optional SQL default (`"0"`, `"'none'"`).
        case column(String, String, in: String, default: String? = nil)

        /// A column of a new table.
        public struct Column: Sendable, Equatable {
            /// The column's name.
            public var name: String
            /// Its SQL type, e.g. `TEXT`.
            public var type: String
            /// Its `DEFAULT` expression in SQL, if any.
            public var defaultSQL: String?
            /// A column `name` of `type`, with an optional default.
            public init(_ name: String, _ type: String, default defaultSQL: String? = nil) {
                self.name = name
                self.type = type
                self.defaultSQL = defaultSQL
            }
        }
    }

    /// The model's name that documents migrated by this migrator record.
    public let modelName: String
    /// The model's version they record.
    public let modelVersion: String?
    /// The highest compatibility level this app supports.
    public let compatibilityLevel: Int
    /// The registered migrations, in the order they run.
    public private(set) var migrations: [Migration] = []
    /// Whether this migrator adds its migrations to whatever model a document has (see ``supplementary()``).
    public let isSupplementary: Bool

    /// A migrator for an app's model: after it ran, the document's model is `modelName` at `modelVersion` and
    /// `compatibilityLevel`, and a document that records migrations this migrator does not know, or a higher level,
    /// is refused for writing (it was migrated by a newer release of the app).
    public init(modelName: String, modelVersion: String? = nil, compatibilityLevel: Int = 0) {
        self.modelName = modelName
        self.modelVersion = modelVersion
        self.compatibilityLevel = compatibilityLevel
        self.isSupplementary = false
    }

    private init(supplementary: Void) {
        self.modelName = ""
        self.modelVersion = nil
        self.compatibilityLevel = 0
        self.isSupplementary = true
    }

    /// A migrator that adds its migrations to whatever model a document has, as a tool does
    /// (`docconvert migrate` applies a folder of SQL files this way): the document's model name, version and
    /// compatibility level are left as they are, and migrations recorded by others are not a reason to refuse.
    /// It cannot hold fix-ups, which belong to a model's compatibility levels.
    public static func supplementary() -> DocumentMigrator {
        DocumentMigrator(supplementary: ())
    }

    /// Registers a data-transforming migration.
    ///
    /// - Precondition: `identifier` is not registered yet (a programming error, as in GRDB's migrator).
    public mutating func registerMigration(_ identifier: String, checksum: String? = nil,
                                           _ body: @escaping @Sendable (Database) throws -> Void) {
        append(Migration(identifier: identifier, kind: .transforming, checksum: checksum, body: body))
    }

    /// Registers an additive schema change: missing tables and columns are created, existing ones left alone.
    public mutating func registerAdditiveSchema(_ identifier: String, _ changes: [SchemaChange]) {
        let description = changes.map { "\($0)" }.joined(separator: "\n")
        let checksum = SHA256.hash(data: Array(description.utf8)).hexString
        append(Migration(identifier: identifier, kind: .additive, checksum: checksum) { db in
            for change in changes { try Self.apply(change, db) }
        })
    }

    /// Registers a run-once fix-up for a compatibility level: it runs when the document's level is below
    /// `level` and this app supports `level`; afterwards the document is at `level`.
    ///
    /// - Precondition: fix-ups are registered in increasing level order, one per level (so they run in that order).
    public mutating func registerFixup(level: Int, _ identifier: String,
                                       _ body: @escaping @Sendable (Database) throws -> Void) {
        precondition(level >= 1, "compatibility levels start at 1")
        precondition(!isSupplementary, "a supplementary migrator has no compatibility levels")
        precondition(!migrations.contains { if case .fixup(let other) = $0.kind { return other >= level } else { return false } },
                     "fix-ups are registered in increasing level order, one per level")
        append(Migration(identifier: identifier, kind: .fixup(level: level), checksum: nil, body: body))
    }

    private mutating func append(_ migration: Migration) {
        precondition(!migrations.contains { $0.identifier == migration.identifier },
                     "already registered migration \(migration.identifier)")
        migrations.append(migration)
    }

    private static func apply(_ change: SchemaChange, _ db: Database) throws {
        switch change {
        case .table(let name, let primaryKey, let columns):
            guard try !db.tableExists(name) else {
                for column in columns { try apply(.column(column.name, column.type, in: name, default: column.defaultSQL), db) }
                return
            }
            let definitions = ["\(primaryKey.quotedDatabaseIdentifier) INTEGER PRIMARY KEY"] + columns.map {
                "\($0.name.quotedDatabaseIdentifier) \($0.type)" + ($0.defaultSQL.map { " DEFAULT \($0)" } ?? "")
            }
            try db.execute(sql: "CREATE TABLE \(name.quotedDatabaseIdentifier) (\(definitions.joined(separator: ", ")))")
        case .column(let name, let type, let table, let defaultSQL):
            let existing = try db.columns(in: table).map { $0.name.lowercased() }
            guard !existing.contains(name.lowercased()) else { return }
            try db.execute(sql: "ALTER TABLE \(table.quotedDatabaseIdentifier) ADD COLUMN \(name.quotedDatabaseIdentifier) \(type)"
                + (defaultSQL.map { " DEFAULT \($0)" } ?? ""))
        }
    }
}
