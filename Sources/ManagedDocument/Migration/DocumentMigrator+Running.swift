#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import GRDB
import SystemPackage
@_spi(Core) import MDZCore

/// Running a migrator on a document: the migrator owns its algorithm and its tables, as GRDB's `DatabaseMigrator`
/// owns `grdb_migrations`. ``Document`` asks it twice while it opens a document for writing: whether the bundle's
/// model is one it may migrate, from the metadata alone (before anything is extracted), then, on the working copy,
/// to migrate.
extension DocumentMigrator {
    /// What ``migrate(_:model:bundle:)`` did.
    struct Outcome: Sendable, Equatable {
        /// The identifiers of the migrations that ran, in the order they ran.
        var applied: [String]
        /// Whether the document changed (a migration ran, or the model's name, version or level was recorded
        /// anew): the caller saves it.
        var changedDocument: Bool
    }

    /// Refuses a document of another model, or of a newer version of this migrator's model, from its metadata alone.
    ///
    /// A supplementary migrator refuses nothing: it adds to whatever model a document has. Versions are compared as
    /// dotted numbers; versions that are not both dotted numbers are never newer.
    ///
    /// - Throws: ``DocumentError/Code/modelMismatch`` for another model, ``DocumentError/Code/newerModel`` for a
    ///   newer version of this one.
    func checkCanMigrate(_ model: DocumentMetadata.Model, bundle path: FilePath) throws {
        guard !isSupplementary else { return }
        if let name = model.name, name != modelName {
            throw DocumentError(.modelMismatch, path: path,
                                reason: "holds the model '\(name)', not '\(modelName)'; it was made by another app and can only be opened read-only")
        }
        if model.name == modelName, let version = model.version, let appVersion = modelVersion,
           ModelVersion.isNewer(version, than: appVersion) {
            throw DocumentError(.newerModel, path: path,
                                reason: "holds model '\(modelName)' version \(version), newer than this app's \(appVersion): update the app to edit it (it can be opened read-only)")
        }
    }

    /// Runs the pending migrations on a document's store, each in its own transaction, and brings `model` (the
    /// metadata's record) up to date.
    ///
    /// What has run is read from `model` and from the store's own tables together. A document at a higher
    /// compatibility level than this migrator supports, or that records a migration this migrator does not know, is
    /// refused before anything runs (unless the migrator is supplementary). Each migration is recorded in the store in
    /// the transaction that runs it; `model` is changed only when every pending migration succeeded. Call it outside
    /// any transaction.
    ///
    /// - Parameters:
    ///   - db: the document's working store.
    ///   - model: the metadata's model record; on return, this migrator's model with every applied migration.
    ///   - path: the bundle, named in errors.
    /// - Returns: which migrations ran, and whether the document changed.
    /// - Throws: ``DocumentError/Code/newerModel`` when a newer release wrote the document,
    ///   ``DocumentError/Code/migrationFailed`` naming the migration that threw (migrations before it stay committed
    ///   in the store; the bundle is the caller's to keep unchanged).
    func migrate(_ db: Database, model: inout DocumentMetadata.Model, bundle path: FilePath) throws -> Outcome {
        var state = try modelState(db, model: model)
        if let reason = tooNewReason(state) {
            throw DocumentError(.newerModel, path: path, reason: reason)
        }
        var applied: [String] = []
        var level = state.level
        for migration in pending(state) {
            do {
                state.applied.append(try run(migration, db, level: &level))
                applied.append(migration.identifier)
            } catch {
                throw DocumentError(.migrationFailed, path: path, entry: nil,
                                    reason: "migration '\(migration.identifier)' failed; the document on disk is unchanged",
                                    underlyingError: error)
            }
        }
        if isSupplementary {
            // > The document keeps its model; only the record of applied migrations grows.
            if !applied.isEmpty { model.migrations = state.applied }
            return Outcome(applied: applied, changedDocument: !applied.isEmpty)
        }
        let finalLevel = max(level, compatibilityLevel)
        let modelChanged = model.name != modelName || model.version != modelVersion
            || model.compatibilityLevel != finalLevel
        if !applied.isEmpty || modelChanged {
            try MigrationRecord.ensureTables(db)
            try MigrationRecord.recordModel(db, name: modelName, version: modelVersion, compatibilityLevel: finalLevel)
            model = DocumentMetadata.Model(name: modelName, version: modelVersion, compatibilityLevel: finalLevel,
                                           migrations: state.applied)
        }
        return Outcome(applied: applied, changedDocument: !applied.isEmpty || modelChanged)
    }

    /// What the document says about its model, from the metadata and the store together.
    private struct ModelState {
        var applied: [DocumentMetadata.AppliedMigration]
        var level: Int
    }

    private func modelState(_ db: Database, model: DocumentMetadata.Model) throws -> ModelState {
        var applied = model.migrations
        for record in try MigrationRecord.applied(db) where !applied.contains(where: { $0.identifier == record.identifier }) {
            applied.append(record)
        }
        let level = max(model.compatibilityLevel, try MigrationRecord.level(db) ?? 0)
        return ModelState(applied: applied, level: level)
    }

    /// Why this app must not write the document, or `nil` when it may.
    private func tooNewReason(_ state: ModelState) -> String? {
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
    private func pending(_ state: ModelState) -> [Migration] {
        let applied = Set(state.applied.map(\.identifier))
        return migrations.filter { migration in
            guard !applied.contains(migration.identifier) else { return false }
            if case .fixup(let level) = migration.kind { return level > state.level && level <= compatibilityLevel }
            return true
        }
    }

    /// Runs one migration in its own transaction and records it in the store. Returns the record.
    private func run(_ migration: Migration, _ db: Database, level: inout Int) throws -> DocumentMetadata.AppliedMigration {
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

/// The migrator's tables in the store: the applied migrations, and the one-row record of the model.
private enum MigrationRecord {
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

/// Model versions as apps write them: dotted numbers ("2", "1.10") compare as numbers, component by component.
private enum ModelVersion {
    /// Whether `version` is newer than `appVersion`; versions that are not both dotted numbers are never ordered.
    static func isNewer(_ version: String, than appVersion: String) -> Bool {
        guard let mine = components(version), let app = components(appVersion) else { return false }
        for index in 0..<max(mine.count, app.count) {
            let left = index < mine.count ? mine[index] : 0
            let right = index < app.count ? app[index] : 0
            if left != right { return left > right }
        }
        return false
    }

    private static func components(_ version: String) -> [Int]? {
        let parts = version.split(separator: ".", omittingEmptySubsequences: false)
        let numbers = parts.compactMap { part -> Int? in
            guard !part.isEmpty, part.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else { return nil }
            return Int(part)
        }
        return numbers.count == parts.count && !numbers.isEmpty ? numbers : nil
    }
}
