import Crypto
import Foundation
import GRDB

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

// MARK: Running

/// The in-store record of applied migrations and of the model.
enum MigrationRecord {
    static let migrationsTable = "managed_document_migrations"
    static let modelTable = "managed_document_model"

    static func ensureTables(_ db: Database) throws {
        try db.execute(sql: """
            CREATE TABLE IF NOT EXISTS \(migrationsTable) (
                identifier TEXT PRIMARY KEY NOT NULL, checksum TEXT, applied_at TEXT NOT NULL);
            CREATE TABLE IF NOT EXISTS \(modelTable) (
                id INTEGER PRIMARY KEY CHECK (id = 1), name TEXT, version TEXT, compatibility_level INTEGER NOT NULL);
            """)
    }

    /// Records the document's model (name, version, compatibility level) in the store's one-row model table.
    static func recordModel(_ db: Database, name: String?, version: String?, compatibilityLevel: Int) throws {
        try db.execute(sql: """
            INSERT INTO \(modelTable)(id, name, version, compatibility_level) VALUES (1, ?, ?, ?)
            ON CONFLICT(id) DO UPDATE SET name = excluded.name, version = excluded.version,
                compatibility_level = excluded.compatibility_level
            """, arguments: [name, version, compatibilityLevel])
    }

    static func applied(_ db: Database) throws -> [DocumentMetadata.AppliedMigration] {
        guard try db.tableExists(migrationsTable) else { return [] }
        return try Row.fetchAll(db, sql: "SELECT identifier, checksum, applied_at FROM \(migrationsTable) ORDER BY rowid").map {
            DocumentMetadata.AppliedMigration(identifier: $0[0], checksum: $0[1],
                                              appliedAt: ISO8601.parse($0[2] ?? "") ?? Date(timeIntervalSince1970: 0))
        }
    }

    static func level(_ db: Database) throws -> Int? {
        guard try db.tableExists(modelTable) else { return nil }
        return try Int.fetchOne(db, sql: "SELECT compatibility_level FROM \(modelTable) WHERE id = 1")
    }
}

extension DocumentMigrator {
    /// What the document says about its model, from the metadata and the store together.
    struct DocumentModelState {
        var applied: [DocumentMetadata.AppliedMigration]
        var level: Int
    }

    func modelState(_ db: Database, metadata: DocumentMetadata) throws -> DocumentModelState {
        var applied = metadata.model.migrations
        for record in try MigrationRecord.applied(db) where !applied.contains(where: { $0.identifier == record.identifier }) {
            applied.append(record)
        }
        let level = max(metadata.model.compatibilityLevel, try MigrationRecord.level(db) ?? 0)
        return DocumentModelState(applied: applied, level: level)
    }

    /// Why this app must not write the document, or `nil` when it may.
    func tooNewReason(_ state: DocumentModelState) -> String? {
        if isSupplementary { return nil }
        if state.level > compatibilityLevel {
            return "has compatibility level \(state.level); this app supports up to \(compatibilityLevel): update the app to edit it (it can be opened read-only)"
        }
        let known = Set(migrations.map(\.identifier))
        if let unknown = state.applied.first(where: { !known.contains($0.identifier) }) {
            return "was migrated by a newer version of the app (migration '\(unknown.identifier)' is unknown here): update the app to edit it (it can be opened read-only)"
        }
        return nil
    }

    /// The migrations still to run, in order.
    func pending(_ state: DocumentModelState) -> [Migration] {
        let applied = Set(state.applied.map(\.identifier))
        return migrations.filter { migration in
            guard !applied.contains(migration.identifier) else { return false }
            if case .fixup(let level) = migration.kind { return level > state.level && level <= compatibilityLevel }
            return true
        }
    }

    /// Runs one migration in its own transaction and records it in the store. Returns the record.
    func run(_ migration: Migration, _ db: Database, level: inout Int) throws -> DocumentMetadata.AppliedMigration {
        let record = DocumentMetadata.AppliedMigration(identifier: migration.identifier, checksum: migration.checksum,
                                                       appliedAt: Date())
        try db.inTransaction {
            try MigrationRecord.ensureTables(db)
            try migration.body(db)
            try db.execute(sql: "INSERT INTO \(MigrationRecord.migrationsTable)(identifier, checksum, applied_at) VALUES (?, ?, ?)",
                           arguments: [record.identifier, record.checksum, ISO8601.format(record.appliedAt)])
            guard !isSupplementary else { return .commit }  // the document's model is not this migrator's
            var newLevel = level
            if case .fixup(let fixupLevel) = migration.kind { newLevel = max(level, fixupLevel) }
            try MigrationRecord.recordModel(db, name: modelName, version: modelVersion, compatibilityLevel: newLevel)
            level = newLevel
            return .commit
        }
        return record
    }
}
