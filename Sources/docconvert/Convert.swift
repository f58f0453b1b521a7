import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import ManagedDocument
import SystemPackage

struct Convert: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "convert",  // named, not derived from the type's name at every start (docs/BENCHMARKS.md)
        abstract: "Convert a legacy SQLite store or UIManagedDocument package into a bundle, losing nothing.",
        discussion: """
            SOURCE is a SQLite store found by content, whatever its extension (with its -wal, -shm, -journal \
            sidecars and Core Data's .NAME_SUPPORT/_EXTERNAL_DATA folder), or a UIManagedDocument package \
            (a folder holding StoreContent/persistentStore).

            The store is copied while no other process can commit to it, recovered by SQLite (rows that live only \
            in the -wal are included, a hot -journal is rolled back), checked (integrity_check, same tables and row \
            counts), packed, verified and renamed into place. Only then are the legacy files kept, moved to a \
            backup folder (the default: docconvert-backup/ beside the source) or deleted. Running the same command \
            again after a crash finishes the job; a finished conversion is recognised and not redone.

            Examples:
              docconvert convert TasteB.sqlite
              docconvert convert minimalTime.sqlite --legacy keep --json
              docconvert convert Diary.mydoc --output ~/Documents/Diary.mdz --legacy delete
            """
    )

    @Argument(help: "The legacy store file or package folder.")
    var source: String

    @Option(name: .shortAndLong, help: "The bundle to write (default: SOURCE's name with .mdz, beside it).")
    var output: String?

    @Option(name: .long, help: "What to do with the legacy files once the bundle is safe: keep, backup or delete.")
    var legacy: LegacyPolicy = .backup

    @Option(name: .long, help: "Where backups go (default: docconvert-backup/ beside the source; same volume).")
    var backupDir: String?

    @Option(name: .long, parsing: .unconditional, help: "Seconds to wait for another process to close or finish writing the store.")
    var busyTimeout: Double = 5

    @Option(name: .long, help: "The bundle's media type.")
    var mediaType: String = BundleLayout.defaultMediaType

    @OptionGroup var compression: CompressionOptions
    @OptionGroup var outputOptions: OutputOptions

    func validate() throws {
        guard busyTimeout >= 0 else { throw ValidationError("--busy-timeout must not be negative") }
        try validateMediaType(mediaType)
    }

    func run() throws {
        var options = ConversionOptions()
        options.legacyPolicy = legacy
        options.backupDirectory = backupDir.map { FilePath($0) }
        options.busyTimeout = busyTimeout
        options.mediaType = mediaType
        options.writing = compression.writingOptions
        let report = try reportingErrors(json: outputOptions.json) {
            try LegacyConverter(options: options).convert(storeAt: FilePath(source), to: output.map { FilePath($0) })
        }
        if outputOptions.json {
            try JSONOutput.print(report)
            return
        }
        switch report.outcome {
        case .converted:
            let rows = report.rowCounts.values.reduce(0, +)
            print("converted \(report.source) (\(report.kind.rawValue), \(formatBytes(UInt64(report.sourceBytes))), \(counted(report.rowCounts.count, "table")), \(counted(rows, "row")))")
            print("  wrote \(report.bundle) (\(formatBytes(UInt64(report.bundleBytes))), verified)")
        case .alreadyConverted:
            print("already converted: \(report.source) -> \(report.bundle)")
        }
        switch report.legacyPolicy {
        case .keep: print("  legacy files kept in place")
        case .backup:
            if let location = report.backupLocation, !report.disposedFiles.isEmpty {
                print("  legacy files moved to \(location)")
            }
        case .delete:
            if !report.disposedFiles.isEmpty { print("  legacy files deleted: \(report.disposedFiles.count)") }
        }
        for warning in report.warnings { print("  warning: \(warning)") }
    }
}

extension LegacyPolicy: ExpressibleByArgument {}
