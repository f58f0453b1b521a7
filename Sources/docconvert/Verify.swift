import ArgumentParser
import Foundation
import ManagedDocument
import SystemPackage

struct Verify: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",  // named, not derived from the type's name at every start (docs/BENCHMARKS.md)
        abstract: "Check bundles completely: structure, checksums, metadata and the store's integrity.",
        discussion: """
            For each bundle: every check the reader makes when it opens one, then every entry is inflated and \
            its CRC-32, size and SHA-256 compared, and the store is checked by SQLite (`PRAGMA integrity_check`, \
            or `quick_check` with --quick) and against the metadata. Bundles are never changed. All bundles are \
            checked even when one fails; the exit status is that of the first failure (65 damaged or not a bundle, 66 missing, 74 I/O error).

            Examples:
              docconvert verify Notes.mdz
              docconvert verify --json archive/*.mdz
            """
    )

    @Argument(help: "The bundles to verify.")
    var bundles: [String]

    @Flag(name: .long, help: "Run PRAGMA quick_check instead of the slower, complete integrity_check.")
    var quick = false

    @OptionGroup var output: OutputOptions

    struct ItemJSON: Encodable {
        var path: String
        var ok: Bool
        var formatVersion: Int?
        var storeDigest: String?
        var entryCount: Int?
        var uncompressedBytes: UInt64?
        var sqliteCheck: String?
        var rowCounts: [String: Int]?
        var notices: [String]?
        var error: ErrorJSON?
    }

    struct Result: Encodable {
        var ok: Bool
        var bundles: [ItemJSON]
    }

    func validate() throws {
        guard !bundles.isEmpty else { throw ValidationError("name at least one bundle to verify") }
    }

    func run() throws {
        var items: [ItemJSON] = []
        var worst: DocumentError?
        for bundle in bundles {
            do {
                let reader = try BundleReader(at: FilePath(bundle))
                printNotices(reader, bundle: bundle)
                let report = try reader.verify(full: !quick)
                items.append(ItemJSON(path: bundle, ok: true, formatVersion: reader.metadata.formatVersion,
                                      storeDigest: reader.metadata.store.contentDigest, entryCount: report.entryCount,
                                      uncompressedBytes: report.uncompressedBytes, sqliteCheck: report.sqliteCheck,
                                      rowCounts: report.rowCounts, notices: reader.notices.isEmpty ? nil : reader.notices))
                if !output.json {
                    let rows = report.rowCounts.values.reduce(0, +)
                    print("ok: \(bundle): format version \(reader.metadata.formatVersion), \(counted(report.entryCount, "entry", plural: "entries")), \(formatBytes(report.uncompressedBytes)), \(counted(report.rowCounts.count, "table")), \(counted(rows, "row")), \(report.sqliteCheck) ok")
                }
            } catch let error as DocumentError {
                worst = worst ?? error
                items.append(ItemJSON(path: bundle, ok: false, error: ErrorJSON(error)))
                if !output.json {
                    FileHandle.standardError.write(Data("error: \(DocConvert.message(for: error))\n".utf8))
                }
            }
        }
        if output.json {
            try JSONOutput.print(Result(ok: worst == nil, bundles: items))
        }
        if let worst { throw ExitCode(DocConvert.exitStatus(for: worst)) }
    }
}
