import ArgumentParser
import Foundation
import GRDB
import ManagedDocument
import SystemPackage

/// What the three sample apps have in common: a model with migrations, a legacy store name, and a summary.
public protocol SampleModel: SendableMetatype {
    associatedtype Summary: Codable & Sendable & Equatable
    /// The file name the app's old release used (`TasteB.sqlite`); the document is the same stem with `.mdz`.
    static var legacyStoreName: String { get }
    static var migrator: DocumentMigrator { get }
    static func summary(_ db: Database) throws -> Summary
}

extension TasteApp: SampleModel {
    public static let legacyStoreName = "TasteB.sqlite"
}

extension DiaryApp: SampleModel {
    public static let legacyStoreName = "Diary.sqlite"
}

extension TimeApp: SampleModel {
    public static let legacyStoreName = "minimalTime.sqlite"
}

/// One launch of a sample app, as a test or the executable runs it.
public struct SampleLaunch<Model: SampleModel>: Sendable {
    public var document: FilePath
    /// The legacy conversion done by this launch, if any.
    public var conversion: ConversionReport?
    /// Migrations applied by this launch.
    public var appliedMigrations: [String]
    public var metadata: DocumentMetadata
    public var summary: Model.Summary

    /// Opens the app's document in `folder` the way the app does at launch: the legacy store beside it is
    /// converted first if the document does not exist yet, pending migrations run, `edit` (if any) changes the
    /// content, the document is saved and closed.
    public static func launch(in folder: FilePath, legacy: LegacyPolicy = .backup, workingDirectory: FilePath? = nil,
                              edit: (@Sendable (Database) throws -> Void)? = nil) async throws -> SampleLaunch {
        let stem = FilePath(Model.legacyStoreName).stem ?? Model.legacyStoreName
        let path = folder.appending("\(stem).\(BundleLayout.defaultExtension)")
        var options = Document.OpenOptions()
        options.conversion.legacyPolicy = legacy
        options.migrations = Model.migrator
        options.workingDirectory = workingDirectory
        options.model = DocumentMetadata.Model(name: Model.migrator.modelName)
        let document = try await Document.open(at: path, options: options)
        do {
            if let edit { try await document.writer.write(edit) }
            let summary = try await document.reader.read { try Model.summary($0) }
            try await document.close(savingChanges: true)
            return SampleLaunch(document: path, conversion: document.conversionReport,
                                appliedMigrations: document.appliedMigrations, metadata: document.metadata,
                                summary: summary)
        } catch {
            try? await document.close(savingChanges: false)  // Squash close error: the first error is what counts.
            throw error
        }
    }

    /// The launch as the executable prints it.
    public func printReport() throws {
        if let conversion {
            print("converted \(conversion.source) (\(conversion.kind.rawValue), \(conversion.rowCounts.values.reduce(0, +)) rows) into \(document)")
        } else {
            print("opened \(document)")
        }
        let model = metadata.model
        print("model \(model.name ?? "?") \(model.version ?? "?"), compatibility level \(model.compatibilityLevel)")
        if appliedMigrations.isEmpty {
            print("migrations: none pending (\(model.migrations.count) applied earlier)")
        } else {
            print("migrations applied now: \(appliedMigrations.joined(separator: ", "))")
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        print(String(decoding: try encoder.encode(summary), as: UTF8.self))
    }
}

/// The options every sample app executable takes.
public struct SampleAppOptions: ParsableArguments {
    @Option(name: .shortAndLong, help: "The folder holding the app's document, or its legacy store.")
    public var folder: String = "."

    @Option(name: .long, help: "What happens to the legacy store once converted: keep, backup or delete.")
    public var legacy: LegacyPolicy = .backup

    public init() {}

    /// Launches the app once and prints what happened; errors become one line and a non-zero exit.
    public func launch<Model: SampleModel>(_ model: Model.Type,
                                           edit: (@Sendable (Database) throws -> Void)? = nil) async throws {
        do {
            try await SampleLaunch<Model>.launch(in: FilePath(folder), legacy: legacy, edit: edit).printReport()
        } catch let error as DocumentError {
            FileHandle.standardError.write(Data("error: \(error)\n".utf8))
            throw ExitCode(error.code == .inUse ? 75 : 65)
        }
    }
}

extension LegacyPolicy: ExpressibleByArgument {}
