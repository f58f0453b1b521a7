import ArgumentParser
import Foundation
@_spi(Core) import MDZCore
import ManagedDocument
import SystemPackage

struct Inspect: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "inspect",  // named, not derived from the type's name at every start (docs/BENCHMARKS.md)
        abstract: "Show a bundle's metadata, entries, sizes and store facts.",
        discussion: """
            Reads the central directory and DocumentMetadata.json only, after checking the bundle's structure; \
            no entry is inflated. Use `verify` to check the data itself.

            Examples:
              docconvert inspect Notes.mdz
              docconvert inspect Notes.mdz --json | python3 -m json.tool
            """
    )

    @Argument(help: "The bundle to inspect.")
    var bundle: String

    @OptionGroup var output: OutputOptions

    struct EntryJSON: Encodable {
        var name: String
        var size: UInt64
        var compressedSize: UInt64
        var method: String
        var crc32: String
    }

    struct Result: Encodable {
        var path: String
        var fileSize: UInt64
        var mediaType: String
        var isZIP64: Bool
        var compressionRatio: Double
        var entries: [EntryJSON]
        /// How the store is read: `none`, `used` or `stale` (FORMAT.md 11.4).
        var restartIndex: String
        /// What a person should know though nothing is refused (a stale index, a `mimetype` that cannot be sniffed).
        var notices: [String]
        var metadata: DocumentMetadata
    }

    func run() throws {
        let reader = try reportingErrors(json: output.json) { try BundleReader(at: FilePath(bundle)) }
        let entries = reader.entries.map {
            EntryJSON(name: $0.name, size: $0.size, compressedSize: $0.compressedSize,
                      method: $0.isDirectory ? "directory" : ($0.isCompressed ? "deflate" : "store"),
                      crc32: String(format: "%08x", $0.crc32))
        }
        let total = reader.entries.reduce(UInt64(0)) { $0 + $1.size }
        let ratio = reader.fileSize == 0 ? 0 : Double(total) / Double(reader.fileSize)
        if output.json {
            try JSONOutput.print(Result(path: bundle, fileSize: reader.fileSize, mediaType: reader.mediaType,
                                        isZIP64: reader.isZIP64, compressionRatio: ratio, entries: entries,
                                        restartIndex: reader.restartIndex.word, notices: reader.notices,
                                        metadata: reader.metadata))
            return
        }
        let metadata = reader.metadata
        let dates = ISO8601DateFormatter()
        print("\(bundle): managed document, format version \(metadata.formatVersion)\(reader.isZIP64 ? ", zip64" : "")")
        print("  media type:     \(reader.mediaType)")
        print("  document ID:    \(metadata.documentID.uuidString)")
        print("  created:        \(dates.string(from: metadata.createdAt))")
        print("  modified:       \(dates.string(from: metadata.modifiedAt))")
        print("  generator:      \(metadata.generator.name) \(metadata.generator.version)")
        print("  size:           \(formatBytes(reader.fileSize)) holding \(formatBytes(total)) (\(String(format: "%.2f", ratio)):1)")
        let model = metadata.model
        print("  model:          \(model.name ?? "(unnamed)") version \(model.version ?? "-"), compatibility level \(model.compatibilityLevel)")
        if model.migrations.isEmpty {
            print("  migrations:     none applied")
        } else {
            print("  migrations:")
            for migration in model.migrations {
                print("    \(migration.identifier)  \(dates.string(from: migration.appliedAt))\(migration.checksum.map { "  \($0.prefix(12))" } ?? "")")
            }
        }
        let store = metadata.store
        print("  store:          \(formatBytes(UInt64(store.size))), page size \(store.pageSize), user_version \(store.userVersion)")
        if let digest = store.digest {
            print("  store digest:   \(digest)")  // of the segment digests (format version 2)
        } else {
            print("  store SHA-256:  \(store.sha256 ?? "-")")  // of the whole store (format version 1)
        }
        print("  schema:         \(store.schemaFingerprint.prefix(16))…")
        print("  restart index:  \(reader.restartIndex)")
        if let segments = store.segments {
            print("  segment hashes: \(segments.count) × \(formatBytes(UInt64(segments.interval))) (SHA-256 each)")
        } else {
            print("  segment hashes: none (written before they were recorded, or by another writer)")
        }
        if let index = store.index, let entry = reader.entry(named: index.entry) {
            // > Format version 3 (FORMAT.md 13.2): where the records above came from.
            print("  store index:    \(index.entry), \(formatBytes(entry.size)): \(counted(store.segments?.count ?? 0, "record")) and a hash tree of root \(index.root.prefix(16))…, all checked when the bundle opened")
        } else {
            print("  store index:    none (before format version 3, the metadata holds the segment records)")
        }
        for notice in reader.notices { print("  notice:         \(notice)") }
        if let provenance = metadata.provenance {
            print("  converted from: \(provenance.fileName) (\(provenance.kind), \(formatBytes(UInt64(provenance.size)))) on \(dates.string(from: provenance.convertedAt))")
            if let coreData = provenance.coreData {
                print("  Core Data:      store UUID \(coreData.storeUUID ?? "-"), \(coreData.storeType ?? "-"), framework \(coreData.frameworkVersion ?? "-"), entities \(coreData.modelVersionHashes.keys.sorted().joined(separator: ", "))")
            }
        }
        print("  entries:")
        for entry in entries {
            print("    \(entry.method.padding(toLength: 9, withPad: " ", startingAt: 0)) \(String(entry.size).leftPadded(12)) \(String(entry.compressedSize).leftPadded(12))  \(entry.name)")
        }
    }
}

extension RestartIndexUse {
    /// One word for scripts: `none`, `used` or `stale`.
    var word: String {
        switch self {
        case .absent: return "none"
        case .used: return "used"
        case .stale: return "stale"
        }
    }

}

extension String {
    func leftPadded(_ width: Int) -> String {
        count >= width ? self : String(repeating: " ", count: width - count) + self
    }
}
