import ArgumentParser
import Foundation
import ManagedDocument

/// `docconvert`: create, inspect, verify, query and extract managed-document bundles.
@main
struct DocConvert: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "docconvert",
        abstract: "Convert legacy SQLite stores into managed-document bundles (.mdz); create, inspect, verify, query, extract and migrate them.",
        discussion: """
            A managed document is one zip file holding a SQLite store and its metadata: `mimetype` first \
            (stored, readable at byte 38), `DocumentMetadata.json`, `StoreContent/persistentStore`, and optional \
            Core Data external data and additional content.

            Every bundle is read as untrusted input: its structure, names, sizes, checksums and metadata are \
            checked before anything is extracted. Every write goes to a temporary file beside the destination, \
            is flushed, re-read and verified, and only then renamed into place.

            Exit status: 0 success; 64 usage error; 65 the input is damaged, hostile or not a bundle; \
            66 an input does not exist; 73 an output cannot be created or already exists; 74 an I/O error; \
            75 the document is in use or busy.

            Examples:
              docconvert convert minimalTime.sqlite   # into minimalTime.mdz
              docconvert create Notes.mdz
              docconvert inspect Notes.mdz --json
              docconvert verify *.mdz
              docconvert query Notes.mdz "SELECT count(*) FROM note"
              docconvert extract Notes.mdz --output Notes.sqlite
              docconvert migrate ~/Documents --migrations migrations/ --dry-run
              docconvert batch /srv/home --jobs 4 --report home.json
            """,
        version: ManagedDocumentVersion.string,
        subcommands: [Convert.self, Batch.self, Create.self, Inspect.self, Verify.self, Extract.self, Query.self, Migrate.self]
    )

    /// The exit status for an error, one switch over the codes (sysexits.h).
    static func exitStatus(for error: DocumentError) -> Int32 {
        switch error.code {
        case .notFound: return 66
        case .alreadyExists, .cannotCreate: return 73
        case .ioFailure: return 74
        case .inUse, .storeBusy: return 75
        case .invalidArgument: return 64
        default: return 65
        }
    }
}

/// Runs a command body, printing a `DocumentError` as one `error: …` line and exiting with its status.
func reportingErrors<T>(_ body: () throws -> T) throws -> T {
    do {
        return try body()
    } catch let error as DocumentError {
        FileHandle.standardError.write(Data("error: \(error)\n".utf8))
        throw ExitCode(DocConvert.exitStatus(for: error))
    }
}

/// The async form of ``reportingErrors(_:)``.
func reportingErrors<T>(_ body: () async throws -> T) async throws -> T {
    do {
        return try await body()
    } catch let error as DocumentError {
        FileHandle.standardError.write(Data("error: \(error)\n".utf8))
        throw ExitCode(DocConvert.exitStatus(for: error))
    }
}
