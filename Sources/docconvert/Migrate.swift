import ArgumentParser
import Foundation
import ManagedDocument
import SystemPackage

struct Migrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "migrate",  // named, not derived from the type's name at every start (docs/BENCHMARKS.md)
        abstract: "Apply a folder of SQL migrations to a bundle or to every bundle in a folder, each once.",
        discussion: """
            DIR holds one file per migration, named V<version>__<description>.sql (V1__create_tables.sql, \
            V2__add_categories.sql, V2.1__fix_names.sql). Versions are compared number by number; each file runs \
            once per document, in version order, in its own transaction, and is recorded in the document (metadata \
            model.migrations and the store's managed_document_migrations table) with the SHA-256 of its content.

            Before anything is applied, every document is checked against the folder, as Flyway's validate does: \
            an applied migration whose file was edited, renamed or removed, or a new file whose version sorts \
            below one already applied, is reported and nothing is applied to any document. Migrations recorded by \
            an app (not named V…__…) are left alone.

            TARGET is a bundle, or a folder searched recursively for bundles, found by content and by the walk \
            rule of `batch`: hidden folders are searched, symbolic links are not followed, and docconvert's own \
            files and backup folders are skipped. Each document is opened for writing (its lock is taken; one in use is \
            reported busy), migrated on a working copy, and saved atomically once all its migrations succeeded; \
            a migration that fails leaves that document exactly as it was.

            Exit status: 0 every document is up to date; 65 a migration failed, the folder and a document \
            disagree, or a bundle is damaged; 66 TARGET or DIR does not exist; 73 a document's folder cannot be \
            written; 74 an I/O error; 75 a document was in use (the first failure's status, as in docs/CLI.md).

            Examples:
              docconvert migrate Notes.mdz --migrations migrations/ --dry-run
              docconvert migrate ~/Documents --migrations migrations/
              docconvert migrate shared/ --migrations migrations/ --json > report.json
            """
    )

    @Argument(help: "A bundle, or a folder searched recursively for bundles.")
    var target: String

    @Option(name: .long, help: "The folder of V<version>__<description>.sql files.")
    var migrations: String

    @Flag(name: .long, help: "Check and print what would be applied; change nothing.")
    var dryRun = false

    @Option(name: .long, parsing: .unconditional, help: "Seconds to wait for a document that another process has open for writing.")
    var lockTimeout: Double = 0

    @OptionGroup var outputOptions: OutputOptions

    func validate() throws {
        guard lockTimeout >= 0 else { throw ValidationError("--lock-timeout must not be negative") }
    }

    /// One document's outcome, as `--json` prints it.
    struct DocumentResult: Encodable {
        enum Status: String, Encodable {
            case upToDate = "up-to-date", wouldApply = "would-apply", applied, invalid, busy, failed
        }
        var path: String
        var status: Status
        var applied: [String] = []
        var pending: [String] = []
        var problems: [String] = []
        var error: ErrorJSON?
        /// The failure's code, for the exit status (not printed: `error.code` says it).
        var failure: DocumentError.Code?

        enum CodingKeys: String, CodingKey {
            case path, status, applied, pending, problems, error
        }
    }

    struct Report: Encodable {
        struct MigrationFile: Encodable {
            var identifier: String
            var version: String
            var checksum: String
        }
        var migrations: [MigrationFile]
        var dryRun: Bool
        var documents: [DocumentResult]
        var succeeded: Bool
    }

    func run() async throws {
        let folder = try reportingErrors(json: outputOptions.json) { try SQLMigrationFolder(directory: FilePath(migrations)) }
        let bundles = try reportingErrors(json: outputOptions.json) { try Document.bundles(under: FilePath(target)) }

        // > Validate every document first: one that disagrees with the folder stops everything.
        var results: [DocumentResult] = []
        var pendingFiles: [[SQLMigrationFolder.File]] = []
        for bundle in bundles {
            var result = DocumentResult(path: bundle.string, status: .upToDate)
            var pending: [SQLMigrationFolder.File] = []
            do {
                let metadata = try Document.metadata(at: bundle)
                let validation = folder.validate(applied: metadata.model.migrations)
                result.problems = validation.problems
                pending = validation.pending
                result.pending = pending.map(\.identifier)
                if !validation.isValid { result.status = .invalid }
            } catch let error as DocumentError {
                result.status = .failed
                result.error = ErrorJSON(error)
                result.failure = error.code
            }
            results.append(result)
            pendingFiles.append(pending)
        }
        let validationFailed = results.contains { $0.status == .invalid || $0.status == .failed }

        if !validationFailed {
            for index in results.indices where !pendingFiles[index].isEmpty {
                if dryRun {
                    results[index].status = .wouldApply
                    continue
                }
                await apply(folder, to: &results[index])
            }
        }

        let succeeded = results.allSatisfy { $0.status == .upToDate || $0.status == .wouldApply || $0.status == .applied }
        if outputOptions.json {
            let files = folder.files.map {
                Report.MigrationFile(identifier: $0.identifier, version: $0.versionString, checksum: $0.checksum)
            }
            try JSONOutput.print(Report(migrations: files, dryRun: dryRun, documents: results, succeeded: succeeded))
        } else {
            printText(results, folder: folder, validationFailed: validationFailed)
        }
        if !succeeded { throw ExitCode(Self.exitStatus(of: results)) }
    }

    /// The exit status of a run that did not succeed: 65 when the folder and a document disagree; otherwise that of
    /// the first document that failed, from its code (a folder that cannot be written is 73, as everywhere); 75 when
    /// the only failures are documents in use.
    static func exitStatus(of results: [DocumentResult]) -> Int32 {
        if results.contains(where: { $0.status == .invalid }) {
            return DocConvert.exitStatus(for: .migrationChanged)
        }
        if let failed = results.first(where: { $0.status == .failed }) {
            return DocConvert.exitStatus(for: failed.failure ?? .migrationFailed)
        }
        return DocConvert.exitStatus(for: .inUse)
    }

    private func apply(_ folder: SQLMigrationFolder, to result: inout DocumentResult) async {
        do {
            result.applied = try await folder.apply(to: FilePath(result.path), lockTimeout: lockTimeout)
            result.pending = Array(result.pending.drop { result.applied.contains($0) })
            result.status = .applied
        } catch let error as DocumentError {
            result.status = error.code == .inUse ? .busy : .failed
            result.error = ErrorJSON(error)
            if error.code == .cannotCreate {
                // > The library's advice (open the document read-only) is an app's; a migration has to write.
                let cause = error.underlyingError.map { " (\($0))" } ?? ""
                result.error?.message = "\(result.path): cannot write beside the document in its folder\(cause); make the folder writable for this user and run again; the document is unchanged"
            } else if error.code == .readOnly {
                let why = error.reason.components(separatedBy: "; open it with").first ?? error.reason
                result.error?.message = "\(result.path): \(why); make it writable for this user (chmod u+w) and run again; the document is unchanged"
            }
            result.failure = error.code
        } catch {
            result.status = .failed
            result.error = ErrorJSON(code: DocumentError.Code.migrationFailed.description,
                                     message: "\(result.path): the migration failed (\(error)); the document is unchanged")
            result.failure = .migrationFailed
        }
    }

    private func printText(_ results: [DocumentResult], folder: SQLMigrationFolder, validationFailed: Bool) {
        if results.isEmpty { print("no bundles found in \(target)") }
        for result in results {
            switch result.status {
            case .upToDate:
                print("\(result.path): up to date")
            case .wouldApply:
                print("\(result.path): would apply \(result.pending.joined(separator: ", "))")
            case .applied:
                print("\(result.path): applied \(result.applied.joined(separator: ", "))")
            case .invalid:
                for problem in result.problems { printError("\(result.path): \(problem)") }
            case .busy, .failed:
                printError(result.error?.message ?? "\(result.path): failed")
            }
        }
        if validationFailed {
            printError("nothing was applied: the migrations folder and the documents above disagree")
        }
    }

    private func printError(_ line: String) {
        FileHandle.standardError.write(Data("error: \(line)\n".utf8))
    }
}
