import Foundation
import GRDB
import SystemPackage
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

@Suite("The migrator runs its own migrations: what it records in the store and the model, and what it reports")
struct DocumentMigratorTests {
    private let bundle: FilePath = "/documents/Journal.mdz"

    private func release(_ version: String, level: Int = 0, fixup: Bool = false) -> DocumentMigrator {
        var migrator = DocumentMigrator(modelName: "Journal", modelVersion: version, compatibilityLevel: level)
        migrator.registerAdditiveSchema("journal-1", [.table("entry", primaryKey: "id", columns: [.init("body", "TEXT")])])
        migrator.registerMigration("journal-1-seed") { db in try db.execute(sql: "INSERT INTO entry(body) VALUES ('first')") }
        if fixup {
            migrator.registerFixup(level: 1, "journal-level-1") { db in try db.execute(sql: "UPDATE entry SET body = upper(body)") }
        }
        return migrator
    }

    /// The store's own record: applied identifiers, and the model row (name, version, level), or `nil` without one.
    private func records(_ db: Database) throws -> (applied: [String], model: [String]?) {
        let applied = try String.fetchAll(db, sql: "SELECT identifier FROM managed_document_migrations ORDER BY rowid")
        let model = try Row.fetchOne(db, sql: "SELECT name, version, compatibility_level FROM managed_document_model")
            .map { row -> [String] in [row[0] ?? "-", row[1] ?? "-", "\(row[2] as Int)"] }
        return (applied, model)
    }

    @Test("a new document: every migration runs and is recorded; a second run does nothing; a new version is recorded")
    func outcomes() throws {
        let queue = try DatabaseQueue()
        var model = DocumentMetadata.Model()
        let first = try queue.writeWithoutTransaction { db in try release("1").migrate(db, model: &model, bundle: bundle) }
        #expect(first == .init(applied: ["journal-1", "journal-1-seed"], changedDocument: true))
        #expect(model.name == "Journal" && model.version == "1" && model.compatibilityLevel == 0)
        #expect(model.migrations.map(\.identifier) == ["journal-1", "journal-1-seed"])
        #expect(try queue.read(records).applied == ["journal-1", "journal-1-seed"])
        #expect(try queue.read(records).model == ["Journal", "1", "0"])

        let again = try queue.writeWithoutTransaction { db in try release("1").migrate(db, model: &model, bundle: bundle) }
        #expect(again == .init(applied: [], changedDocument: false))

        // > Nothing to run, but the model moved on: the change is recorded, and the document must be saved.
        let before = model.migrations
        let version2 = try queue.writeWithoutTransaction { db in try release("2", level: 1).migrate(db, model: &model, bundle: bundle) }
        #expect(version2 == .init(applied: [], changedDocument: true))
        #expect(model == DocumentMetadata.Model(name: "Journal", version: "2", compatibilityLevel: 1, migrations: before))
        #expect(try queue.read(records).model == ["Journal", "2", "1"])
    }

    @Test("a fix-up raises the level; the store's record counts even when the metadata lost it")
    func fixupsAndStoreRecord() throws {
        let queue = try DatabaseQueue()
        var model = DocumentMetadata.Model()
        let outcome = try queue.writeWithoutTransaction { db in
            try release("2", level: 1, fixup: true).migrate(db, model: &model, bundle: bundle)
        }
        #expect(outcome.applied == ["journal-1", "journal-1-seed", "journal-level-1"])
        #expect(model.compatibilityLevel == 1)
        #expect(try queue.read { try String.fetchOne($0, sql: "SELECT body FROM entry") } == "FIRST")
        // > Metadata from an older bundle that knows nothing: the store's tables say what ran.
        var stale = DocumentMetadata.Model()
        let rerun = try queue.writeWithoutTransaction { db in
            try release("2", level: 1, fixup: true).migrate(db, model: &stale, bundle: bundle)
        }
        #expect(rerun == .init(applied: [], changedDocument: true))
        #expect(stale.migrations.map(\.identifier) == ["journal-1", "journal-1-seed", "journal-level-1"])
        #expect(stale.compatibilityLevel == 1)
    }

    @Test("too new: a higher level or an unknown migration is refused before anything runs, in the same words")
    func tooNew() throws {
        let queue = try DatabaseQueue()
        var model = DocumentMetadata.Model()
        _ = try queue.writeWithoutTransaction { db in try release("2", level: 1, fixup: true).migrate(db, model: &model, bundle: bundle) }
        let saved = model
        var older = release("1")
        older.registerMigration("journal-later") { _ in Issue.record("must not run") }
        let error = #expect(throws: DocumentError.self) {
            try queue.writeWithoutTransaction { db in try older.migrate(db, model: &model, bundle: bundle) }
        }
        #expect(error?.code == .newerModel)
        #expect(error?.path == bundle)
        #expect(error?.reason == "has compatibility level 1; this app supports up to 0: update the app to edit it (it can be opened read-only)")
        #expect(model == saved)

        var unknown = DocumentMetadata.Model(name: "Journal", version: "2", compatibilityLevel: 0,
                                             migrations: [.init(identifier: "journal-9", checksum: nil, appliedAt: Date())])
        let fresh = try DatabaseQueue()
        let unknownError = #expect(throws: DocumentError.self) {
            try fresh.writeWithoutTransaction { db in try release("2").migrate(db, model: &unknown, bundle: bundle) }
        }
        #expect(unknownError?.reason == "was migrated by a newer version of the app (migration 'journal-9' is unknown here): update the app to edit it (it can be opened read-only)")
        #expect(try fresh.read { try $0.tableExists("managed_document_migrations") } == false)
    }

    @Test("a migration that throws is named; those before it stay recorded in the store; the model is unchanged")
    func failing() throws {
        let queue = try DatabaseQueue()
        var migrator = release("1")
        struct Broken: Error {}
        migrator.registerMigration("journal-1-broken") { db in
            try db.execute(sql: "INSERT INTO entry(body) VALUES ('lost')")
            throw Broken()
        }
        var model = DocumentMetadata.Model()
        let error = #expect(throws: DocumentError.self) {
            try queue.writeWithoutTransaction { db in try migrator.migrate(db, model: &model, bundle: bundle) }
        }
        #expect(error?.code == .migrationFailed)
        #expect(error?.reason == "migration 'journal-1-broken' failed; the document on disk is unchanged")
        #expect(error?.underlyingError is Broken)
        #expect(model == DocumentMetadata.Model())
        #expect(try queue.read(records).applied == ["journal-1", "journal-1-seed"])
        #expect(try queue.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM entry") } == 1)
    }

    @Test("a supplementary migrator records its migrations and leaves the model's name, version, level and row alone")
    func supplementary() throws {
        let queue = try DatabaseQueue()
        var model = DocumentMetadata.Model(name: "Other", version: "7", compatibilityLevel: 3,
                                           migrations: [.init(identifier: "other-1", checksum: nil, appliedAt: Date())])
        var tool = DocumentMigrator.supplementary()
        tool.registerMigration("V1__notes", checksum: "abc") { db in try db.execute(sql: "CREATE TABLE note(x)") }
        let outcome = try queue.writeWithoutTransaction { db in try tool.migrate(db, model: &model, bundle: bundle) }
        #expect(outcome == .init(applied: ["V1__notes"], changedDocument: true))
        #expect(model.name == "Other" && model.version == "7" && model.compatibilityLevel == 3)
        #expect(model.migrations.map(\.identifier) == ["other-1", "V1__notes"])
        #expect(model.migrations.last?.checksum == "abc")
        #expect(try queue.read(records).model == nil)
        let again = try queue.writeWithoutTransaction { db in try tool.migrate(db, model: &model, bundle: bundle) }
        #expect(again == .init(applied: [], changedDocument: false))
    }

    @Test("before anything is extracted: another model, or a newer version of this one, is refused in the same words")
    func checkCanMigrate() throws {
        let migrator = release("2")
        try migrator.checkCanMigrate(DocumentMetadata.Model(), bundle: bundle)
        try migrator.checkCanMigrate(DocumentMetadata.Model(name: "Journal", version: "1.9"), bundle: bundle)
        try migrator.checkCanMigrate(DocumentMetadata.Model(name: "Journal", version: "beta"), bundle: bundle)
        let other = #expect(throws: DocumentError.self) {
            try migrator.checkCanMigrate(DocumentMetadata.Model(name: "Recipes"), bundle: bundle)
        }
        #expect(other?.code == .modelMismatch)
        #expect(other?.reason == "holds the model 'Recipes', not 'Journal'; it was made by another app and can only be opened read-only")
        let newer = #expect(throws: DocumentError.self) {
            try migrator.checkCanMigrate(DocumentMetadata.Model(name: "Journal", version: "2.0.1"), bundle: bundle)
        }
        #expect(newer?.code == .newerModel)
        #expect(newer?.reason == "holds model 'Journal' version 2.0.1, newer than this app's 2: update the app to edit it (it can be opened read-only)")
        try DocumentMigrator.supplementary().checkCanMigrate(DocumentMetadata.Model(name: "Recipes", version: "99"), bundle: bundle)
    }
}
