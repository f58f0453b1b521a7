import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import ManagedDocument
import SystemPackage

struct Create: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "create",  // named, not derived from the type's name at every start (docs/BENCHMARKS.md)
        abstract: "Create a new document bundle with an empty store, or with a copy of a SQLite database.",
        discussion: """
            The bundle is written aside, verified and renamed into place; an existing file is never replaced. \
            With --from, the database is copied through SQLite's backup API (committed rows still in a -wal \
            included), checked, and packed; the source is opened read-only and never changed.

            Examples:
              docconvert create Notes.mdz
              docconvert create Notes.mdz --from notes.sqlite --compression store
              docconvert create Notes.mdz --model-name Notes --model-version 3 --media-type application/vnd.example.notes+zip
            """
    )

    @Argument(help: "The bundle to create (conventionally with the .mdz extension).")
    var bundle: String

    @Option(name: .long, help: ArgumentHelp("A SQLite database to copy into the new document.", valueName: "store"))
    var from: String?

    @Option(name: .long, help: "The media type written to the mimetype entry and the metadata.")
    var mediaType: String = BundleLayout.defaultMediaType

    @Option(name: .long, help: "The app's model name, recorded in the metadata.")
    var modelName: String?

    @Option(name: .long, help: "The app's model version, recorded in the metadata.")
    var modelVersion: String?

    @Option(name: .long, help: "The document's initial compatibility level.")
    var compatibilityLevel: Int = 0

    @OptionGroup var compression: CompressionOptions
    @OptionGroup var output: OutputOptions

    func validate() throws {
        try validateMediaType(mediaType)
    }

    func run() throws {
        let path = FilePath(bundle)
        let metadata = DocumentMetadata(
            mediaType: mediaType,
            model: .init(name: modelName, version: modelVersion, compatibilityLevel: compatibilityLevel))
        let options = compression.writingOptions
        let written = try reportingErrors(json: output.json) {
            if let from {
                return try BundleWriter.createDocument(at: path, copyingStore: FilePath(from), metadata: metadata,
                                                       options: options)
            }
            return try BundleWriter.createEmptyDocument(at: path, metadata: metadata, options: options)
        }
        if output.json {
            struct Result: Encodable { var path: String; var metadata: DocumentMetadata }
            try JSONOutput.print(Result(path: bundle, metadata: written))
        } else {
            print("created \(bundle) (document \(written.documentID.uuidString))")
        }
    }
}

/// Refuses a `--media-type` that no reader would accept (docs/FORMAT.md section 2), before anything is done.
func validateMediaType(_ mediaType: String) throws {
    let bytes = Array(mediaType.utf8)
    let parts = mediaType.split(separator: "/", omittingEmptySubsequences: false)
    guard (1...255).contains(bytes.count), bytes.allSatisfy({ (0x21...0x7E).contains($0) }), parts.count == 2,
          !parts[0].isEmpty, !parts[1].isEmpty
    else { throw ValidationError("--media-type must look like type/subtype, printable ASCII, at most 255 bytes") }
}
