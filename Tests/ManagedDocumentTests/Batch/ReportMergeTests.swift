import Foundation
import Synchronization
import SystemPackage
import Testing
@_spi(Core) import MDZCore
import ManagedDocument
import TestSupport

/// `docconvert merge-reports` and ``BatchReportMerger``: the merge rules on real and on crafted report sets, its memory
/// with many items, and the salvage of a run killed before it wrote its report.
@Suite("merging shard reports")
struct ReportMergeTests {
    typealias Run = (status: Int32, stdout: String, stderr: String)

    static func docconvert(_ arguments: [String]) throws -> Run { try FleetScaleTests.docconvert(arguments) }

    /// A report of `shard` holding `items`, written as `docconvert batch --report` writes it.
    static func writeReport(_ items: [BatchItem], shard: BatchShard, to path: FilePath, finishedAt: Date = Date()) throws {
        var run = BatchReport(root: "/srv/home", shard: shard, dryRun: false, legacy: "backup", compression: "deflate",
                              jobs: 1, generator: "test")
        run.items = items
        run.finishedAt = finishedAt
        for item in items { run.summary.outcomes[item.outcome, default: 0] += 1 }
        try run.merged(into: nil).encoded().write(to: URL(fileURLWithPath: path.string))
    }

    /// An item as a report holds it (decoded, as an app reading reports makes them).
    static func item(_ source: String, _ outcome: BatchItem.Outcome) -> BatchItem {
        let json = #"{"source":"\#(source)","kind":"sqlite-store","outcome":"\#(outcome.rawValue)","bundle":"\#(source).mdz","bytesIn":100,"bytesOut":40,"duration":0}"#
        return try! JSONDecoder().decode(BatchItem.self, from: Data(json.utf8))
    }

    static func merged(_ run: Run) throws -> [String: Any] {
        try #require(JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any])
    }

    @Test("the rules: agreement, missing shards, duplicates, items converted twice, foreign and disordered reports")
    func rules() async throws {
        try await withTemporaryDirectory { directory in
            let folder = directory.appending("reports")
            try FileManager.default.createDirectory(atPath: folder.string, withIntermediateDirectories: true)
            let shards = try Self.agreeingShards(in: folder)
            try Self.checkDuplicatedShard(shards, in: folder, directory: directory)
            try Self.checkMissingAndStrayShards(in: folder, directory: directory)
            try Self.checkDisorderedAndForeignReports(in: folder, directory: directory)
            try Self.checkStreamedRun(of: shards, directory: directory)
        }
    }

    /// Writes 3 shards of 60 items to `folder`, each item in the shard its path hashes to, checks that they merge,
    /// and returns their items.
    private static func agreeingShards(in folder: FilePath) throws -> [[BatchItem]] {
        var shards: [[BatchItem]] = [[], [], []]
        for number in 0..<60 {
            let source = "home/user\(number)/Notes.sqlite"
            let outcome: BatchItem.Outcome = number % 10 == 0 ? .notAStore : .converted
            shards[BatchShard.bucket(of: source, count: 3)].append(Self.item(source, outcome))
        }
        for index in 0..<3 {
            try Self.writeReport(shards[index].sorted { $0.source < $1.source }, shard: BatchShard(index: index, count: 3),
                                 to: folder.appending("shard-\(index).json"))
        }
        let good = try Self.docconvert(["merge-reports", folder.string, "3", "--json"])
        #expect(good.status == 0, "\(good.stderr)")
        let report = try Self.merged(good)
        #expect((report["items"] as? [Any])?.count == 60 && (report["shardCount"] as? Int) == 3)
        #expect(((report["summary"] as? [String: Any])?["outcomes"] as? [String: Int]) == ["converted": 54, "not-a-store": 6])
        let text = try Self.docconvert(["merge-reports", folder.string, "--output", folder.appending("merged.json").string])
        #expect(text.status == 0 && text.stdout.contains("60 items") && text.stdout.contains("the tree is finished"), "\(text.stdout)")
        // The merged report beside the shards' is not taken for one of them next time.
        #expect(try Self.docconvert(["merge-reports", folder.string, "3"]).status == 0)
        try FileManager.default.removeItem(atPath: folder.appending("merged.json").string)
        return shards
    }

    /// The same shard again under another name, nothing converted there: duplicates, totals unchanged. Then converted
    /// in both: two workers outside the locks. A person must look: no merged report.
    private static func checkDuplicatedShard(_ shards: [[BatchItem]], in folder: FilePath, directory: FilePath) throws {
        let again = shards[1].map { item -> BatchItem in
            var copy = item
            if copy.outcome == .converted { copy.outcome = .alreadyDone }
            return copy
        }.sorted { $0.source < $1.source }
        try Self.writeReport(again, shard: BatchShard(index: 1, count: 3), to: folder.appending("shard-1-again.json"))
        let duplicated = try Self.docconvert(["merge-reports", folder.string, "--json"])
        let withDuplicates = try Self.merged(duplicated)
        #expect(duplicated.status == 0 && duplicated.stderr.contains("in two reports"), "\(duplicated.stderr)")
        #expect((withDuplicates["duplicates"] as? [Any])?.count == shards[1].count)
        #expect(((withDuplicates["summary"] as? [String: Any])?["outcomes"] as? [String: Int]) == ["converted": 54, "not-a-store": 6])
        try Self.writeReport(shards[1].sorted { $0.source < $1.source }, shard: BatchShard(index: 1, count: 3),
                             to: folder.appending("shard-1-again.json"))
        let twice = try Self.docconvert(["merge-reports", folder.string, "--json"])
        #expect(twice.status == 65 && twice.stderr.contains("converted twice") && twice.stdout.contains("\"error\""),
                "\(twice.status) \(twice.stderr)")
        let output = directory.appending("merged.json")
        #expect(try Self.docconvert(["merge-reports", folder.string, "--output", output.string]).status == 65)
        #expect(!FileManager.default.fileExists(atPath: output.string), "a disagreeing merge wrote a report")
        try FileManager.default.removeItem(atPath: folder.appending("shard-1-again.json").string)
    }

    /// A shard missing; the count expected differs; a stray report of another shard count.
    private static func checkMissingAndStrayShards(in folder: FilePath, directory: FilePath) throws {
        try FileManager.default.moveItem(atPath: folder.appending("shard-0.json").string, toPath: directory.appending("aside.json").string)
        let missing = try Self.docconvert(["merge-reports", folder.string])
        #expect(missing.status == 1 && missing.stderr.contains("no report from shard(s) 0 of 3"), "\(missing.stderr)")
        try FileManager.default.moveItem(atPath: directory.appending("aside.json").string, toPath: folder.appending("shard-0.json").string)
        #expect(try Self.docconvert(["merge-reports", folder.string, "4"]).status == 65)
        try Self.writeReport([Self.item("x.sqlite", .converted)], shard: BatchShard(index: 0, count: 1), to: folder.appending("stray.json"))
        let stray = try Self.docconvert(["merge-reports", folder.string])
        #expect(stray.status == 65 && stray.stderr.contains("disagree on the number of shards"), "\(stray.stderr)")
        try FileManager.default.removeItem(atPath: folder.appending("stray.json").string)
    }

    /// A report whose items were reordered after it was written, and a file that is not a report.
    private static func checkDisorderedAndForeignReports(in folder: FilePath, directory: FilePath) throws {
        var lines = try String(contentsOfFile: folder.appending("shard-2.json").string, encoding: .utf8)
            .split(separator: "\n").map(String.init)
        lines.swapAt(1, 2)
        try Data((lines.joined(separator: "\n") + "\n").utf8).write(to: URL(fileURLWithPath: folder.appending("shard-2.json").string))
        let disordered = try Self.docconvert(["merge-reports", folder.string])
        #expect(disordered.status == 65 && disordered.stderr.contains("not sorted"), "\(disordered.stderr)")
        try Data("{\"notes\": []}".utf8).write(to: URL(fileURLWithPath: folder.appending("shard-2.json").string))
        let foreign = try Self.docconvert(["merge-reports", folder.string])
        #expect(foreign.status == 65 && foreign.stderr.contains("not a batch report"), "\(foreign.stderr)")
        #expect(try Self.docconvert(["merge-reports", directory.appending("none").string]).status == 66)
    }

    /// A run's --json stream saved to a file (items in the order they finished, no attempts): read whole, sorted.
    private static func checkStreamedRun(of shards: [[BatchItem]], directory: FilePath) throws {
        let streamed = directory.appending("streamed")
        try FileManager.default.createDirectory(atPath: streamed.string, withIntermediateDirectories: true)
        let bytes = Mutex(Data())
        let stream = BatchReportStream { data in bytes.withLock { $0 += data } }
        stream.begin(BatchReport(root: "/srv/home", shard: .all, dryRun: false, legacy: "keep", compression: "deflate",
                                 jobs: 1, generator: "test"))
        var summary = BatchSummary()
        for item in shards.flatMap({ $0 }).reversed() {
            stream.item(item)
            summary.outcomes[item.outcome, default: 0] += 1
        }
        stream.end(summary)
        try bytes.withLock { $0 }.write(to: URL(fileURLWithPath: streamed.appending("run.json").string))
        let fromStream = try Self.docconvert(["merge-reports", streamed.string, "1", "--json"])
        #expect(fromStream.status == 0, "\(fromStream.stderr)")
        let sources = (try Self.merged(fromStream)["items"] as? [[String: Any]])?.compactMap { $0["source"] as? String }
        #expect(sources == shards.flatMap { $0 }.map(\.source).sorted())
    }

    @Test("hostile numbers in reports: sizes past Int64.max add up without trapping, negative sizes are refused")
    func hostileNumbers() async throws {
        try await withTemporaryDirectory { directory in
            let folder = directory.appending("reports")
            try FileManager.default.createDirectory(atPath: folder.string, withIntermediateDirectories: true)
            func huge(_ source: String, _ bytes: String) -> BatchItem {
                let json = #"{"source":"\#(source)","kind":"sqlite-store","outcome":"converted","bytesIn":\#(bytes),"bytesOut":\#(bytes),"duration":0}"#
                return try! JSONDecoder().decode(BatchItem.self, from: Data(json.utf8))
            }
            let sources = (0..<8).map { "home/u\($0)/Notes.sqlite" }
            for index in 0..<2 {
                let items = sources.filter { BatchShard.bucket(of: $0, count: 2) == index }.map { huge($0, "\(Int64.max)") }
                try Self.writeReport(items, shard: BatchShard(index: index, count: 2), to: folder.appending("shard-\(index).json"))
            }
            let merged = try Self.docconvert(["merge-reports", folder.string, "--json"])
            #expect(merged.status == 0, "\(merged.stderr)")
            let summary = try Self.merged(merged)["summary"] as? [String: Any]
            #expect((summary?["bytesIn"] as? NSNumber)?.int64Value == Int64.max)
            let negative = sources.filter { BatchShard.bucket(of: $0, count: 2) == 0 }.map { huge($0, "-5") }
            try Self.writeReport(negative, shard: BatchShard(index: 0, count: 2), to: folder.appending("shard-0.json"))
            let refused = try Self.docconvert(["merge-reports", folder.string])
            #expect(refused.status == 65 && refused.stderr.contains("negative size"), "\(refused.stderr)")
        }
    }

    @Test("memory stays flat: 60,000 items in 4 reports merge under 64 MiB, in order, each once",
          .enabled(if: Tools.timeUnavailable == nil, Comment(rawValue: Tools.timeUnavailable ?? "")))
    func boundedMemory() async throws {
        try await withTemporaryDirectory { directory in
            let folder = directory.appending("reports")
            try FileManager.default.createDirectory(atPath: folder.string, withIntermediateDirectories: true)
            var shards: [[BatchItem]] = Array(repeating: [], count: 4)
            for number in 0..<60_000 {
                let source = String(format: "home/u%05d/Library/store-%d.sqlite", number / 10, number)
                shards[BatchShard.bucket(of: source, count: 4)].append(Self.item(source, .converted))
            }
            for index in 0..<4 {
                try Self.writeReport(shards[index].sorted { $0.source < $1.source }, shard: BatchShard(index: index, count: 4),
                                     to: folder.appending("shard-\(index).json"))
            }
            let output = directory.appending("merged.json"), usage = directory.appending("time.txt")
            let run = try Self.docconvert(["merge-reports", folder.string, "4", "--output", output.string])
            #expect(run.status == 0, "\(run.stderr)")
            let timed = Process()
            timed.executableURL = URL(fileURLWithPath: "/usr/bin/time")
            timed.arguments = ["-f", "%M", "-o", usage.string, builtProduct("docconvert"), "merge-reports", folder.string, "4"]
            timed.standardOutput = FileHandle.nullDevice
            try timed.run()
            timed.waitUntilExit()
            let kilobytes = Int(try String(contentsOfFile: usage.string, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)) ?? .max
            if ProcessInfo.processInfo.environment["MANAGED_DOCUMENT_SANITIZER"] == nil {
                #expect(kilobytes <= 64 * 1024, "merge-reports peaked at \(kilobytes) KiB")
            }
            let merged = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: output.string))) as? [String: Any]
            #expect((merged?["items"] as? [[String: Any]])?.count == 60_000)
            let sources = (merged?["items"] as? [[String: Any]])?.compactMap { $0["source"] as? String } ?? []
            #expect(sources == sources.sorted() && Set(sources).count == 60_000)
        }
    }

    @Test("a run killed with SIGKILL: merge-reports says so; the next run of the shard adds what it recorded as a killed attempt")
    func killedRunSalvaged() async throws {
        try await withTemporaryDirectory { directory in
            let root = directory.appending("tree")
            let tree = try BatchTree(in: root, groups: 10)
            let reports = directory.appending("reports")
            try FileManager.default.createDirectory(atPath: reports.string, withIntermediateDirectories: true)
            let report = reports.appending("shard-0.json")
            let worker = try BatchProcess([root.string, "--jobs", "1", "--legacy", "keep", "--report", report.string])
            let started = worker.waitForLines(startingWith: "converted", count: 5)
            kill(worker.process.processIdentifier, SIGKILL)
            _ = worker.finish()
            #expect(started, "the run ended before 5 items were converted")
            #expect(!FileManager.default.fileExists(atPath: report.string))
            let before = try Self.docconvert(["merge-reports", reports.string])
            #expect(before.status == 66 && before.stderr.contains("killed"), "\(before.stderr)")

            let rerun = try BatchProcess.run([root.string, "--jobs", "2", "--legacy", "keep", "--quiet", "--report", report.string])
            #expect(rerun.status == 0 || rerun.status == 65, "\(rerun.stderr)")
            let final = try BatchReport.read(from: report)
            let attempts = try #require(final.attempts)
            #expect(attempts.count == 2 && attempts[0].killed == true && attempts[1].killed == nil)
            #expect(attempts[0].summary.count(.converted) >= 5 && attempts[0].summary.interrupted)
            // > One job runs three worker threads (a conversion waiting for its flush hands its turn on): at most three
            // > items were started and not reported when the kill came.
            #expect((attempts[0].inProgress ?? []).count <= 3, "\(attempts[0].inProgress ?? [])")
            // Every store converted by exactly one attempt, or named in progress by the killed one and found done.
            let inProgress = Set(attempts[0].inProgress ?? [])
            let converted = attempts.map { $0.summary.count(.converted) }.reduce(0, +)
            let foundDone = final.items.filter { $0.outcome == .alreadyDone && inProgress.contains($0.source) }.count
            #expect(converted + foundDone == tree.stores.count, "\(converted) + \(foundDone) of \(tree.stores.count)")
            #expect(final.items.filter { $0.outcome == .converted }.count == converted)
            #expect(!(try FileManager.default.contentsOfDirectory(atPath: reports.string)).contains { $0.hasSuffix(".partial") },
                    "the spool was left")
            let after = try Self.docconvert(["merge-reports", reports.string, "--json"])
            #expect(after.status == 0 || after.status == 1)
            #expect(!after.stderr.contains("killed before"), "\(after.stderr)")
        }
    }
}
