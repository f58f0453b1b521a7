#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import CArchive
import Foundation
@_spi(Core) import MDZCore
import ManagedDocument
import SystemPackage

/// `docconvert`: create, inspect, verify, query and extract managed-document bundles.
@main
struct DocConvert: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "docconvert",
        abstract: "Convert legacy SQLite stores into managed-document bundles (.mdz); create, inspect, verify, query, extract and migrate them.",
        discussion: """
            A managed document is one zip file holding a SQLite store and its metadata, in this order: `mimetype` \
            (stored, readable at byte 38), `StoreContent/persistentStore`, optional Core Data external data and \
            additional content, and `DocumentMetadata.json` last.

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
        subcommands: [Convert.self, Batch.self, MergeReports.self, Create.self, Inspect.self, Verify.self, Extract.self, Query.self, Migrate.self]
    )

    /// Runs the command. A usage error with `--json` also prints `{"error": …}` on standard output, so that a script
    /// always reads one complete JSON document (docs/CLI.md, "Output and errors").
    static func main() async {
        // > `docconvert --version` alone prints what swift-argument-parser prints for it (the version and a newline on
        // > standard output, status 0) without building the parser's tree of every command's options first, which
        // > costs more than the rest of the process's start (docs/BENCHMARKS.md, "Start-up"). Any other command line,
        // > `--version` after a subcommand included, goes through the parser.
        if CommandLine.arguments.dropFirst().elementsEqual(["--version"]) {
            print(configuration.version)
            return
        }
        // > glibc's mktime(3), which libarchive calls for every zip entry's DOS date and time it reads, looks at the
        // > status of /etc/localtime again on each call while TZ is unset (to notice a zone changed meanwhile): a call
        // > per entry of every bundle read or verified. Named in TZ, the same zone file is read once.
        if getenv("TZ") == nil { setenv("TZ", ":/etc/localtime", 0) }
        do {
            var command = try parseAsRoot()
            // > glibc gives threads that allocate at once arenas of their own (up to eight per core) and each keeps
            // > what it freed: a batch's worker threads (three per job) would hold one each. One arena per core keeps
            // > the batch's peak memory flat (docs/BENCHMARKS.md) and its threads do not wait for each other's
            // > allocations. Set once the command line is parsed (no thread has started yet), so that a usage error
            // > or --help does not first read the CPU quota.
            _ = mallopt(M_ARENA_MAX, Int32(clamping: max(2, ProcessInfo.processInfo.activeProcessorCount)))
            if var command = command as? any AsyncParsableCommand {
                try await command.run()
            } else {
                try command.run()
            }
        } catch {
            // > An ExitCode was thrown by a command that has printed its own output already.
            if !(error is ExitCode), exitCode(for: error).rawValue == 64, requestsJSON(CommandLine.arguments) {
                let message = fullMessage(for: error).split(separator: "\n").first.map(String.init) ?? "usage error"
                JSONOutput.printError(ErrorJSON(code: DocumentError.Code.invalidArgument.description,
                                                message: message.hasPrefix("Error: ") ? String(message.dropFirst(7)) : message))
            }
            exit(withError: error)
        }
    }

    /// Whether the command line asks for JSON (`--json` before a `--` that ends the options).
    static func requestsJSON(_ arguments: [String]) -> Bool {
        arguments.dropFirst().prefix { $0 != "--" }.contains("--json")
    }

    /// The exit status for an error code (sysexits.h): one switch, which docs/CLI.md's table of error codes is
    /// checked against (Tests/docconvertTests).
    static func exitStatus(for code: DocumentError.Code) -> Int32 {
        switch code {
        case .invalidArgument: return 64
        case .notFound: return 66
        case .alreadyExists, .cannotCreate: return 73
        case .ioFailure: return 74
        case .inUse, .storeBusy: return 75
        default: return 65
        }
    }

    /// The exit status for an error.
    static func exitStatus(for error: DocumentError) -> Int32 { exitStatus(for: error.code) }

    /// The line printed for an error, without `error: `: the library's line, with advice a shell user can follow
    /// where the library's is for an app developer.
    static func message(for error: DocumentError) -> String {
        if error.code == .notADocument, let path = error.path, isSQLiteFile(path) {
            return "\(path): is a SQLite store, not a bundle; convert it with: docconvert convert \(path)"
        }
        if error.code == .inUse, let path = error.path {
            return "\(path): is open for writing in another process (an app, or another docconvert); close it there, or wait, and run again"
        }
        return error.description
    }

    /// Whether the file is a regular file that starts with SQLite's 16-byte header. It is opened without blocking and
    /// read only when regular: a FIFO named like a bundle must not stall the error message.
    private static func isSQLiteFile(_ path: FilePath) -> Bool {
        guard let descriptor = try? FileDescriptor.open(path, .readOnly, options: [.nonBlocking, .closeOnExec]) else {
            return false  // unopenable: not claimed to be SQLite
        }
        defer { try? descriptor.close() }  // Squash close error of a read-only descriptor.
        var status = stat()
        guard fstat(descriptor.rawValue, &status) == 0, status.st_mode & S_IFMT == S_IFREG else { return false }
        var head = [UInt8](repeating: 0, count: StoreHeader.magic.count)
        let count = (try? head.withUnsafeMutableBytes { try descriptor.read(fromAbsoluteOffset: 0, into: $0) }) ?? 0
        return count == head.count && StoreHeader.hasMagic(head)
    }
}

/// Prints a failure as every command does: one `error: …` line on standard error and, with `--json`, the document
/// `{"error": {"code": …, "message": …}}` on standard output. Returns the exit status to throw.
func failure(_ error: ErrorJSON, status: Int32, json: Bool) -> ExitCode {
    FileHandle.standardError.write(Data("error: \(error.message)\n".utf8))
    if json { JSONOutput.printError(error) }
    return ExitCode(status)
}

/// Runs a command body, printing a `DocumentError` as ``failure(_:status:json:)`` does and exiting with its status.
func reportingErrors<T>(json: Bool, _ body: () throws -> T) throws -> T {
    do {
        return try body()
    } catch let error as DocumentError {
        throw failure(ErrorJSON(error), status: DocConvert.exitStatus(for: error), json: json)
    }
}

/// The async form of ``reportingErrors(json:_:)``.
func reportingErrors<T>(json: Bool, _ body: () async throws -> T) async throws -> T {
    do {
        return try await body()
    } catch let error as DocumentError {
        throw failure(ErrorJSON(error), status: DocConvert.exitStatus(for: error), json: json)
    }
}
