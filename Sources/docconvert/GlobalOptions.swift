import ArgumentParser
import Foundation
import ManagedDocument

/// Options shared by the commands that print results.
struct OutputOptions: ParsableArguments {
    @Flag(name: .long, help: "Print one JSON document on stdout instead of text (shape documented in docs/CLI.md).")
    var json = false
}

/// Options shared by the commands that write bundles.
struct CompressionOptions: ParsableArguments {
    enum Method: String, ExpressibleByArgument, CaseIterable {
        case deflate, store
    }

    @Option(name: .long, help: "How entries are compressed: deflate or store.")
    var compression: Method = .deflate

    @Option(name: .long, help: ArgumentHelp(
        "Deflate level, 1 (fastest) to 9 (smallest).",
        discussion: "Levels 1-3 use ISA-L (igzip), several times as fast as zlib; 4-9 use zlib (6 is zip's default)."))
    var level: Int = WritingOptions.defaultDeflateLevel

    @Option(name: .long, help: ArgumentHelp(
        "Bundle format version to write: 3 (the default) or 2.",
        discussion: """
        Version 3 keeps the store's segment digests and restart points in an index entry of their own instead of the \
        metadata, so that a segment is 128 KiB at any store size and reading in place costs the same on a 1 GiB and \
        a 64 GiB document (docs/FORMAT.md 13.2). Readers of this release read both; earlier releases refuse version \
        3 as newer: write 2 for them.
        """,
        valueName: "version"))
    var formatVersion: Int = BundleLayout.formatVersion

    func validate() throws {
        guard (1...9).contains(level) else { throw ValidationError("--level must be between 1 and 9") }
        guard (2...BundleLayout.newestFormatVersion).contains(formatVersion) else {
            throw ValidationError("--format-version must be 2 or \(BundleLayout.newestFormatVersion)")
        }
    }

    var writingCompression: WritingOptions.Compression {
        compression == .store ? .store : .deflate(level: level)
    }

    /// The writing options these flags ask for.
    var writingOptions: WritingOptions {
        var options = WritingOptions(compression: writingCompression)
        options.formatVersion = formatVersion
        return options
    }
}

enum JSONOutput {
    static func print<T: Encodable>(_ value: T) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        let data = try encoder.encode(value)
        FileHandle.standardOutput.write(data)
        FileHandle.standardOutput.write(Data("\n".utf8))
    }

    /// The document a command prints when it fails before it has a result: `{"error": {…}}`.
    static func printError(_ error: ErrorJSON) {
        struct Failure: Encodable { var error: ErrorJSON }
        do {
            try print(Failure(error: error))
        } catch {
            FileHandle.standardError.write(Data("error: the error above could not be written as JSON (\(error))\n".utf8))
        }
    }
}

/// An error as the JSON outputs show it.
struct ErrorJSON: Encodable {
    var code: String
    var entry: String?
    var message: String

    init(_ error: DocumentError) {
        code = error.code.description
        entry = error.entry
        message = DocConvert.message(for: error)
    }

    init(code: String, message: String) {
        self.code = code
        self.entry = nil
        self.message = message
    }
}

/// `count` and `noun`, the plural when the count is not one: "1 table", "5 tables", "2 entries".
func counted(_ count: Int, _ noun: String, plural: String? = nil) -> String {
    "\(count) \(count == 1 ? noun : plural ?? noun + "s")"
}

func formatBytes(_ bytes: UInt64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"]
    var value = Double(bytes)
    var unit = 0
    while value >= 1024 && unit < units.count - 1 {
        value /= 1024
        unit += 1
    }
    return unit == 0 ? "\(bytes) B" : String(format: "%.1f %@", value, units[unit])
}

/// Prints what a person should know about how a bundle is read (nothing refused), one `notice:` line each, on
/// standard error.
func printNotices(_ reader: BundleReader, bundle: String) {
    for notice in reader.notices {
        FileHandle.standardError.write(Data("notice: \(bundle): \(notice)\n".utf8))
    }
}
