import ArgumentParser
import Foundation
import ManagedDocument
import SystemPackage

struct MergeReports: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "merge-reports",
        abstract: "Merge the shard reports of a fleet into one report and say whether the tree is finished.",
        discussion: """
            Reads every report in FOLDER (the *.json files `docconvert batch --report` wrote, and any shard-*.json) \
            as a stream: memory stays flat whatever the number of items. Each report says which shard K of N it \
            is, so the merge knows N and names the shards that have no report; EXPECTED_SHARDS, when given, must \
            equal N. Every item belongs to one shard: an item found in two reports (two report files for one \
            shard, e.g. an array submitted as 0-15 and later as 1-16) is listed under "duplicates", and its \
            converted entry is kept, else the entry of the report that finished last. A run killed before it \
            wrote its report leaves its spool beside it: the shard must run again (the rerun adds what the killed \
            run recorded to the report).

            Without --json, a summary is printed; with --json, the merged report (one JSON document, one item per \
            line); with --output FILE, the merged report is written to FILE (aside, then renamed into place). \
            What is missing or wrong goes to stderr.

            Exit status: 0 every shard reported, nothing failed, busy, interrupted or killed; 1 the tree is not \
            finished (run the shards named); 65 the reports disagree (their shard counts, EXPECTED_SHARDS, an \
            item converted twice) or a file is not a report: a person must look, and no merged report is \
            written; 66 FOLDER is missing or holds no report; 64 usage error; 73 --output cannot be written.

            Examples:
              docconvert merge-reports /shared/home/.docconvert-reports 16
              docconvert merge-reports reports/ --json > merged.json
              docconvert merge-reports reports/ 16 --output merged.json
            """
    )

    @Argument(help: ArgumentHelp("The folder of shard reports.", valueName: "folder"))
    var folder: String

    @Argument(help: ArgumentHelp("The number of shards the array had; the reports must agree.", valueName: "expected-shards"))
    var expectedShards: Int?

    @Option(name: .long, help: ArgumentHelp("Also write the merged report to this file.", valueName: "file"))
    var output: String?

    @OptionGroup var outputOptions: OutputOptions

    func validate() throws {
        if let expectedShards, expectedShards < 1 {
            throw ValidationError("EXPECTED_SHARDS must be a positive number (got \(expectedShards))")
        }
    }

    func run() throws {
        let json = outputOptions.json
        let merger = try reportingErrors(json: json) {
            try BatchReportMerger(folder: FilePath(folder), expectedShards: expectedShards)
        }
        let result: BatchReportMerger.Result
        if let output {
            result = try reportingErrors(json: json) {
                try merger.write(toFileAt: FilePath(output))
            }
            if json, result.status != .disagreement {
                FileHandle.standardOutput.write(try Data(contentsOf: URL(fileURLWithPath: output)))
            }
        } else {
            result = try reportingErrors(json: json) { try merger.write(to: json ? .standardOutput : nil) }
        }
        // > A disagreement is an error, said as every command says one; what is left of an unfinished tree is a list
        // > for the operator, printed as it is.
        let isError = result.status == .disagreement
        for (index, line) in result.messages.enumerated() {
            FileHandle.standardError.write(Data("\(isError && index == 0 ? "error: " : "")\(line)\n".utf8))
        }
        if result.status == .disagreement {
            if json {
                JSONOutput.printError(ErrorJSON(code: DocumentError.Code.metadataMismatch.description,
                                                message: result.messages.first ?? "the reports disagree"))
            }
            throw ExitCode(result.status.rawValue)
        }
        if !json { print(Self.summary(result)) }
        if result.status != .finished { throw ExitCode(result.status.rawValue) }
    }

    /// The human summary.
    static func summary(_ result: BatchReportMerger.Result) -> String {
        let summary = result.summary
        let outcomes = BatchItem.Outcome.allCases.map { "\($0.rawValue) \(summary.count($0))" }.joined(separator: ", ")
        var lines = ["merged \(counted(result.reports.count, "report")) of \(counted(result.shardCount ?? 0, "shard")): \(counted(summary.items, "item")) (\(outcomes))"]
        lines.append("source bytes \(summary.bytesIn), bundle bytes \(summary.bytesOut); duplicates \(result.duplicates); killed runs salvaged \(result.reports.map(\.killedAttempts).reduce(0, +))")
        lines.append(result.status == .finished ? "the tree is finished" : "the tree is not finished: see above")
        return lines.joined(separator: "\n")
    }
}
