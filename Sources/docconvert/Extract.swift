import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import ManagedDocument
import SystemPackage

struct Extract: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "extract",  // named, not derived from the type's name at every start (docs/BENCHMARKS.md)
        abstract: "Extract a bundle's store as a loose SQLite file, or the whole bundle into a folder.",
        discussion: """
            With --output, the store becomes a loose SQLite file that `sqlite3` opens, and Core Data external \
            data, when there is some, goes beside it in `.<name>_SUPPORT/_EXTERNAL_DATA/` as Core Data expects. \
            With --directory, the store, its external data and the additional content are written into a new folder, laid out as in the bundle (mimetype and DocumentMetadata.json are checked, not written).

            The bundle is checked as it streams (sizes, CRC-32s, SHA-256s); nothing appears under the final \
            names unless everything checked out. Existing files are never replaced.

            Examples:
              docconvert extract Notes.mdz --output Notes.sqlite
              docconvert extract Notes.mdz --directory Notes-contents
            """
    )

    @Argument(help: "The bundle to extract.")
    var bundle: String

    @Option(name: .shortAndLong, help: "Where to write the store as a loose SQLite file.")
    var output: String?

    @Option(name: .long, help: "A new folder to extract the content entries into, laid out as in the bundle.")
    var directory: String?

    @OptionGroup var options: OutputOptions

    func validate() throws {
        guard (output == nil) != (directory == nil) else {
            throw ValidationError("give exactly one of --output STORE or --directory FOLDER")
        }
    }

    struct Result: Encodable {
        var bundle: String
        var store: String?
        var externalData: String?
        var directory: String?
    }

    func run() throws {
        let reader = try reportingErrors(json: options.json) { try BundleReader(at: FilePath(bundle)) }
        printNotices(reader, bundle: bundle)
        var result = Result(bundle: bundle)
        if let directory {
            try reportingErrors(json: options.json) { _ = try reader.extract(into: FilePath(directory)) }
            result.directory = directory
        } else if let output {
            let placed = try reportingErrors(json: options.json) { try reader.extractStore(to: FilePath(output)) }
            result.store = placed.store.string
            result.externalData = placed.externalData?.string
        }
        if options.json {
            try JSONOutput.print(result)
        } else if let directory = result.directory {
            print("extracted \(bundle) into \(directory)")
        } else if let store = result.store {
            print("extracted \(bundle) store to \(store)" + (result.externalData.map { ", external data to \($0)" } ?? ""))
        }
    }
}
