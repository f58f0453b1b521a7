import Foundation
import GRDB
import LegacySamples
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

@Suite("docconvert batch")
struct BatchTests {
    @Test("a report writes kinds, codes and outcome counts as the words it always held, and reads them back")
    func reportWords() throws {
        var failed = BatchItem(source: "a/Notes.sqlite", kind: .sqliteStore, outcome: .failed)
        failed.error = .init(code: .storeBusy, message: "a/Notes.mdz: busy")
        let items = [failed, BatchItem(source: "b", kind: .legacyStore(.uiManagedDocumentPackage), outcome: .converted),
                     BatchItem(source: "c", kind: .symlink, outcome: .notAStore)]
        var summary = BatchSummary()
        for item in items { summary.add(item) }
        let encoder = BatchReport.encoder
        #expect(String(decoding: try encoder.encode(summary), as: UTF8.self) == """
            {"bytesIn":0,"bytesOut":0,"duration":0,"interrupted":false,"items":3,"outcomes":{"busy":0,"converted":1,\
            "failed":1,"not-a-store":1,"skipped-already-done":0,"would-convert":0}}
            """)
        #expect(String(decoding: try encoder.encode(failed), as: UTF8.self) == """
            {"bytesIn":0,"bytesOut":0,"duration":0,"error":{"code":"storeBusy","message":"a/Notes.mdz: busy"},\
            "kind":"sqlite-store","outcome":"failed","source":"a/Notes.sqlite"}
            """)
        #expect(try items.map { String(decoding: try encoder.encode($0.kind), as: UTF8.self) }
                == ["\"sqlite-store\"", "\"uimanageddocument-package\"", "\"symlink\""])
        let decoder = JSONDecoder()
        #expect(try decoder.decode(BatchSummary.self, from: try encoder.encode(summary)) == summary)
        #expect(try items.map { try decoder.decode(BatchItem.self, from: try encoder.encode($0)) } == items)
        #expect(throws: DecodingError.self) { try decoder.decode(BatchItem.Kind.self, from: Data("\"pipe\"".utf8)) }
    }

    /// Every store became a verified, lossless bundle; every other file is as it was; no temporaries or locks.
    private func checkConverted(_ tree: BatchTree, report: BatchReport, requireAll: Bool = true) throws {
        let bundles = Dictionary(report.items.compactMap { item in item.bundle.map { (item.source, $0) } },
                                 uniquingKeysWith: { first, _ in first })
        for (source, store) in tree.stores.sorted(by: { $0.key < $1.key }) {
            guard let bundle = bundles[source] else {
                if requireAll { Issue.record("\(source) has no bundle in the report") }
                continue
            }
            #expect(store.bundles.contains(bundle), "\(source) -> \(bundle)")
            let path = tree.root.appending(bundle)
            #expect(try Fixtures.bundleDigests(path) == store.digests, "\(source): rows differ from what SQLite reads")
            #expect(try BundleReader(at: path).metadata.provenance?.kind == store.kind, "\(source)")
            #expect(!FileManager.default.fileExists(atPath: tree.root.appending(source).string),
                    "\(source) was not moved to the backup folder")
        }
        for (path, sha) in tree.untouched {
            #expect(try FileDigest(of: tree.root.appending(path)).sha256 == sha, "\(path) changed")
        }
        for (path, outcome) in tree.others where path.hasSuffix("link.sqlite") && outcome == "not-a-store" {
            let destination = try FileManager.default.destinationOfSymbolicLink(atPath: tree.root.appending(path).string)
            #expect(destination == "TasteB.sqlite", "\(path) is still the same link")
        }
        #expect(tree.leftovers() == [], "temporaries or locks left behind")
    }

    @Test("a tree of a few hundred stores of every kind: converted losslessly, each item reported once; a rerun converts nothing")
    func wholeTree() async throws {
        try await withTemporaryDirectory { directory in
            let root = directory.appending("tree")
            let tree = try BatchTree(in: root, groups: 50)
            #expect(tree.stores.count >= 250)
            let reportPath = directory.appending("report.json")

            let first = try BatchProcess.run([root.string, "--report", reportPath.string, "--jobs", "2", "--quiet"])
            #expect(first.status == 65, "exit status says something failed: \(first.stderr)")
            let report = try BatchReport.read(reportPath)
            #expect(try report.outcomes() == tree.expectedOutcomes)
            #expect(report.summary.count(.converted) == tree.stores.count)
            #expect(report.summary.count(.failed) == tree.others.values.filter { $0 == "failed" }.count)
            #expect(report.summary.items == report.items.count)
            for item in report.items where item.outcome == .failed {
                #expect(item.error?.code == .storeCorrupt || item.error?.code == .notSQLite, "\(item.source): \(item.error?.message ?? "")")
            }
            for item in report.items where item.outcome == .notAStore {
                let expected: BatchItem.Kind = item.source.hasSuffix("link.sqlite") ? .symlink : item.source.hasSuffix(".mdz") ? .bundle : .file
                #expect(item.kind == expected, "\(item.source): \(item.kind)")
            }
            for item in report.items where item.outcome == .converted {
                #expect(item.storeDigest?.count == 64 && item.sourceSHA256?.count == 64 && item.bytesOut > 0)
            }
            try checkConverted(tree, report: report)
            // Human output: one line per item that is not "not-a-store", then the summary.
            let lines = first.stdout.split(separator: "\n")
            #expect(lines.filter { $0.hasPrefix("converted ") }.count == tree.stores.count)
            #expect(!lines.contains { $0.hasPrefix("not-a-store") })
            #expect(first.stdout.contains("\nsummary:"))

            let second = try BatchProcess.run([root.string, "--report", reportPath.string, "--quiet", "--json"])
            #expect(second.status == 65, "\(second.stderr)")
            let rerun = try BatchReport.decode(second.stdout)  // this run's own items
            var expected = tree.expectedOutcomes
            for source in tree.stores.keys { expected[source] = "skipped-already-done" }
            #expect(try rerun.outcomes() == expected)
            #expect(rerun.summary.count(.converted) == 0)
            try checkConverted(tree, report: rerun)
            // The report file keeps what the first run did, and both runs.
            let kept = try BatchReport.read(reportPath)
            #expect(try kept.outcomes() == tree.expectedOutcomes)
            #expect(kept.attempts?.map { $0.summary.count(.converted) } == [tree.stores.count, 0])
        }
    }

    @Test("--dry-run prints the plan and changes nothing")
    func dryRun() async throws {
        try await withTemporaryDirectory { directory in
            let root = directory.appending("tree")
            let tree = try BatchTree(in: root, groups: 5)
            let before = try Fixtures.fileHashes(root)
            let result = try BatchProcess.run([root.string, "--dry-run", "--json"])
            #expect(result.status == 0, "\(result.stderr)")
            #expect(try Fixtures.fileHashes(root) == before)
            let decoder = JSONDecoder()
            decoder.dateDecodingStrategy = .iso8601
            let plan = try decoder.decode(BatchReport.self, from: Data(result.stdout.utf8))
            var expected = tree.expectedOutcomes
            for source in tree.stores.keys { expected[source] = "would-convert" }
            // A dry run does not open stores: corrupt ones are planned like the others.
            for (path, outcome) in tree.others where outcome == "failed" { expected[path] = "would-convert" }
            #expect(try plan.outcomes() == expected)
            #expect(plan.summary.bytesIn > 0)

            let text = try BatchProcess.run([root.string, "--dry-run"])
            #expect(text.stdout.contains("would-convert"))
            #expect(text.stdout.contains("plan (dry run, nothing changed)"))
        }
    }

    @Test("SIGINT mid-run: in-flight items finish, the rest are left; a rerun converts each remaining item once")
    func interruptAndResume() async throws {
        try await withTemporaryDirectory { directory in
            let root = directory.appending("tree")
            let tree = try BatchTree(in: root, groups: 24)
            let firstReport = directory.appending("first.json")
            let process = try BatchProcess([root.string, "--jobs", "1", "--report", firstReport.string])
            #expect(process.waitForLines(startingWith: "converted", count: 5))
            kill(process.process.processIdentifier, SIGINT)
            let first = process.finish()
            #expect(first.status == 130, "\(first.stderr)")
            #expect(first.stderr.contains("stopping"))
            #expect(first.stdout.contains("interrupted"))
            let partial = try BatchReport.read(firstReport)
            #expect(partial.summary.interrupted)
            let convertedFirst = Set(partial.items.filter { $0.outcome == .converted }.map(\.source))
            #expect(convertedFirst.count >= 5 && convertedFirst.count < tree.stores.count)
            #expect(tree.leftovers() == [], "the interrupted run left temporaries")

            let secondReport = directory.appending("second.json")
            let second = try BatchProcess.run([root.string, "--report", secondReport.string, "--quiet"])
            #expect(second.status == 65, "\(second.stderr)")
            let rest = try BatchReport.read(secondReport)
            let convertedSecond = Set(rest.items.filter { $0.outcome == .converted }.map(\.source))
            #expect(convertedFirst.isDisjoint(with: convertedSecond), "an item was converted twice")
            #expect(convertedFirst.union(convertedSecond) == Set(tree.stores.keys))
            let doneSecond = Set(rest.items.filter { $0.outcome == .alreadyDone }.map(\.source))
            #expect(doneSecond == convertedFirst)
            var all = rest
            all.items += partial.items.filter { $0.outcome == .converted }
            try checkConverted(tree, report: all)
        }
    }

    @Test("a fleet: N shards at once, and two workers on the same shard, convert each item exactly once")
    func fleet() async throws {
        try await withTemporaryDirectory { directory in
            let root = directory.appending("tree")
            let tree = try BatchTree(in: root, groups: 12)
            // The same partition three ways: --shard, a Kubernetes Indexed Job's index, a Slurm array task (of 1-3: ID 2 is
            // shard 2, ID 3 would be shard 0).
            let count = 3
            let ways: [(arguments: [String], environment: [String: String], origin: String)] = [
                (["--shard", "0/3"], [:], "--shard"),
                ([], ["JOB_COMPLETION_INDEX": "1", "DOCCONVERT_SHARD_COUNT": "3"], "JOB_COMPLETION_INDEX"),
                ([], ["SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "3", "SLURM_ARRAY_TASK_MIN": "1"], "SLURM_ARRAY_TASK_ID"),
            ]
            let workers = try ways.enumerated().map { index, way in
                try BatchProcess([root.string, "--jobs", "1", "--quiet", "--report", directory.appending("shard-\(index).json").string]
                                 + way.arguments, environment: way.environment)
            }
            for worker in workers { #expect(worker.finish().status == 65) }
            var merged: [BatchItem] = []
            for index in 0..<count {
                let report = try BatchReport.read(directory.appending("shard-\(index).json"))
                #expect(report.shard.index == index && report.shard.count == count && report.shard.origin == ways[index].origin)
                for item in report.items { #expect(BatchShard.bucket(of: item.source, count: count) == index) }
                merged += report.items
            }
            var mergedReport = BatchReport(root: root.string, shard: .all, dryRun: false, legacy: "backup",
                                           compression: "deflate", jobs: 1, generator: "test")
            mergedReport.items = merged
            #expect(try mergedReport.outcomes() == tree.expectedOutcomes)
            try checkConverted(tree, report: mergedReport)

            // Two workers given the same (whole) tree at once: the document locks keep them apart. Each waits as long
            // as a loaded machine may take to convert an item the other holds (the default 5 s is an operator's choice).
            let second = directory.appending("second")
            let twin = try BatchTree(in: second, groups: 12)
            let pair = try (0..<2).map { index in
                try BatchProcess([second.string, "--jobs", "2", "--quiet", "--shard", "0/1", "--busy-timeout", "120",
                                  "--report", directory.appending("twin-\(index).json").string])
            }
            for worker in pair { #expect(worker.finish().status == 65) }
            let reports = try (0..<2).map { try BatchReport.read(directory.appending("twin-\($0).json")) }
            var converted: [String: Int] = [:]
            for report in reports {
                for item in report.items where item.outcome == .converted { converted[item.source, default: 0] += 1 }
                for item in report.items where twin.stores[item.source] != nil {
                    #expect(item.outcome == .converted || item.outcome == .alreadyDone, "\(item.source): \(item.outcome) \(item.error?.message ?? "")")
                }
            }
            #expect(converted.keys.sorted() == twin.stores.keys.sorted())
            #expect(converted.values.allSatisfy { $0 == 1 }, "an item was converted by both workers")
            var union = reports[0]
            union.items = reports.flatMap(\.items).filter { $0.outcome == .converted }
            try checkConverted(twin, report: union)
        }
    }

    @Test("reports: inside the tree they are never items; a rerun of the shard merges into its report; another shard's report is refused")
    func reportsAcrossReruns() async throws {
        try await withTemporaryDirectory { directory in
            let root = directory.appending("tree")
            let tree = try BatchTree(in: root, groups: 6)
            let reports = root.appending(".docconvert-reports")
            try FileManager.default.createDirectory(atPath: reports.string, withIntermediateDirectories: true)
            // A merged report and a stray one from elsewhere lie in the tree too: recognised by their first bytes.
            try Data((BatchReport.signature + "2,\"items\":[]}").utf8)
                .write(to: URL(fileURLWithPath: root.appending("old-merged-report.json").string))
            var converted: Set<String> = []
            for index in 0..<2 {
                let path = reports.appending("shard-\(index).json")
                let run = try BatchProcess.run([root.string, "--jobs", "2", "--quiet", "--report", path.string],
                                               environment: ["SLURM_ARRAY_TASK_ID": "\(index)", "DOCCONVERT_SHARD_COUNT": "2"])
                #expect(run.status == 65 || run.status == 0, "\(run.stderr)")
                let report = try BatchReport.read(path)
                #expect(report.attempts?.count == 1)
                converted.formUnion(report.items.filter { $0.outcome == .converted }.map(\.source))
                #expect(!report.items.contains { $0.source.contains("report") }, "a report was walked as an item")
            }
            #expect(converted == Set(tree.stores.keys))

            // The same shard again, as a resubmitted task: its items are done, the report still says converted.
            let first = try BatchReport.read(reports.appending("shard-0.json"))
            let again = try BatchProcess.run([root.string, "--quiet", "--report", reports.appending("shard-0.json").string],
                                             environment: ["SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "1",
                                                           "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": "0",
                                                           "DOCCONVERT_SHARD_COUNT": "2"])
            #expect(again.status == (first.summary.count(.failed) > 0 ? 65 : 0), "\(again.stderr)")
            let merged = try BatchReport.read(reports.appending("shard-0.json"))
            #expect(merged.attempts?.count == 2)
            #expect(merged.attempts?.last?.summary.count(.converted) == 0, "the rerun converted something again")
            #expect(merged.items.map(\.source) == first.items.map(\.source).sorted())
            #expect(merged.summary.count(.converted) == first.summary.count(.converted))
            #expect(merged.startedAt == first.startedAt)

            // Another shard's report, a dry run's, or a file that is not a report: refused before anything is done.
            let other = try BatchProcess.run([root.string, "--quiet", "--shard", "1/2", "--report", reports.appending("shard-0.json").string])
            #expect(other.status == 73)
            #expect(other.stderr.contains("shard 0/2") && other.stderr.contains("shard 1/2"), "\(other.stderr)")
            let dry = try BatchProcess.run([root.string, "--quiet", "--dry-run", "--shard", "0/2", "--report", reports.appending("shard-0.json").string])
            #expect(dry.status == 73 && dry.stderr.contains("dry run"), "\(dry.stderr)")
            let notes = directory.appending("notes.json")
            try Data("{\"mine\": true}".utf8).write(to: URL(fileURLWithPath: notes.string))
            let clobber = try BatchProcess.run([root.string, "--quiet", "--report", notes.string])
            #expect(clobber.status == 73 && clobber.stderr.contains("not a batch report"), "\(clobber.stderr)")
            #expect(try Data(contentsOf: URL(fileURLWithPath: notes.string)) == Data("{\"mine\": true}".utf8))
            #expect(try BatchReport.read(reports.appending("shard-0.json")) == merged, "a refused run changed the report")

            // The --json stream is the same shape, read by the same reader.
            let stream = try BatchProcess.run([root.string, "--quiet", "--json", "--shard", "1/2"])
            #expect(stream.stdout.hasPrefix(BatchReport.signature))
            let streamed = directory.appending("stream.json")
            try Data(stream.stdout.utf8).write(to: URL(fileURLWithPath: streamed.string))
            #expect(try BatchReport.read(streamed).items.count == BatchReport.read(reports.appending("shard-1.json")).items.count)
        }
    }

    @Test("reports: runs of one shard that end at once both land in its report (merged under the folder's lock)")
    func concurrentReportCommits() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appending("shard-3.json")
            let shard = try BatchShard(index: 3, count: 8)
            let files = try (0..<8).map { number in
                let run = BatchReport(root: "/srv/home", shard: shard, dryRun: false, legacy: "backup",
                                      compression: "deflate", jobs: 1, generator: "test")
                let file = try BatchReportFile(path: path, run: run)
                var item = BatchItem(source: "user\(number)/Notes.sqlite", kind: .legacyStore(.sqlite), outcome: .converted)
                item.bundle = "user\(number)/Notes.mdz"
                file.add(item)
                file.add(BatchItem(source: "shared.sqlite", kind: .legacyStore(.sqlite), outcome: number == 5 ? .converted : .alreadyDone))
                return file
            }
            await withTaskGroup(of: Void.self) { group in
                for file in files {
                    group.addTask {
                        var summary = BatchSummary()
                        summary.duration = 1
                        _ = try? file.commit(summary: summary)
                    }
                }
            }
            let report = try BatchReport.read(path)
            #expect(report.attempts?.count == 8)
            #expect(report.items.count == 9)
            #expect(report.items.first { $0.source == "shared.sqlite" }?.outcome == .converted,
                    "a later skipped-already-done replaced the run that converted it")
            #expect(report.summary.count(.converted) == 9 && report.summary.duration == 8)
            #expect(try FileSystem.contentsOfDirectory(directory) == ["shard-3.json"], "a temporary was left")
        }
    }

    @Test("--migrations: each converted bundle gets the SQL migrations once; a rerun applies nothing")
    func migrations() async throws {
        try await withTemporaryDirectory { directory in
            let root = directory.appending("tree")
            try FileManager.default.createDirectory(atPath: root.string, withIntermediateDirectories: true)
            let samples = try LegacySamples.makeAll(in: root)
            let folder = directory.appending("migrations")
            try FileManager.default.createDirectory(atPath: folder.string, withIntermediateDirectories: true)
            try Data("CREATE TABLE audit_log (id INTEGER PRIMARY KEY, note TEXT);".utf8)
                .write(to: URL(fileURLWithPath: folder.appending("V1__audit_log.sql").string))
            try Data("INSERT INTO audit_log (note) VALUES ('converted');".utf8)
                .write(to: URL(fileURLWithPath: folder.appending("V2__first_entry.sql").string))
            let reportPath = directory.appending("report.json")
            let first = try BatchProcess.run([root.string, "--migrations", folder.string, "--report", reportPath.string, "--quiet"])
            #expect(first.status == 0, "\(first.stdout)\(first.stderr)")
            let report = try BatchReport.read(reportPath)
            #expect(report.summary.count(.converted) == samples.count)
            for item in report.items {
                #expect(item.migrationsApplied == ["V1__audit_log", "V2__first_entry"], "\(item.source)")
                let metadata = try Document.metadata(at: root.appending(item.bundle!))
                #expect(metadata.model.migrations.map(\.identifier) == ["V1__audit_log", "V2__first_entry"])
            }
            let second = try BatchProcess.run([root.string, "--migrations", folder.string, "--quiet", "--json"])
            #expect(second.status == 0)
            let rerun = try BatchReport.decode(second.stdout)
            #expect(rerun.items.count == samples.count)
            #expect(rerun.items.allSatisfy { $0.outcome == .alreadyDone && $0.migrationsApplied == [] })
        }
    }

    @Test("shards: K/N parsing, scheduler variables, a stable partition")
    func shards() throws {
        #expect(try BatchShard(parsing: "2/8") == BatchShard(index: 2, count: 8))
        for bad in ["8/8", "-1/4", "1/0", "1", "a/b", "1/2/3", ""] {
            let error = #expect(throws: DocumentError.self) { try BatchShard(parsing: bad) }
            #expect(error?.code == .invalidArgument, "one public error type: DocumentError")
        }
        #expect(try BatchShard.fromEnvironment([:]) == nil)
        let missingCount = #expect(throws: DocumentError.self) { try BatchShard.fromEnvironment(["JOB_COMPLETION_INDEX": "3"]) }
        #expect(missingCount?.code == .invalidArgument && missingCount?.reason.contains("DOCCONVERT_SHARD_COUNT") == true)
        let kubernetes = try BatchShard.fromEnvironment(["JOB_COMPLETION_INDEX": "3", "DOCCONVERT_SHARD_COUNT": "4"])
        #expect(kubernetes?.index == 3 && kubernetes?.count == 4 && kubernetes?.origin == "JOB_COMPLETION_INDEX")
        #expect(try BatchShard.fromEnvironment(["JOB_COMPLETION_INDEX": "0"], count: 2)?.count == 2)
        let slurm = try BatchShard.fromEnvironment(["SLURM_ARRAY_TASK_ID": "20", "SLURM_ARRAY_TASK_COUNT": "4",
                                                    "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_STEP": "10"])
        #expect(slurm?.index == 2 && slurm?.count == 4)
        #expect(throws: DocumentError.self) {
            try BatchShard.fromEnvironment(["SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_COUNT": "4"])
        }
        // A contiguous array maps task IDs modulo its size: 0-3 and 1-4 give the same shards to the same IDs.
        for id in 1...4 {
            let oneBased = try BatchShard.fromEnvironment(["SLURM_ARRAY_TASK_ID": "\(id)", "SLURM_ARRAY_TASK_COUNT": "4",
                                                           "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_MAX": "4"])
            #expect(oneBased?.index == id % 4 && oneBased?.count == 4)
        }
        // A fixed number of shards (--shard-count, DOCCONVERT_SHARD_COUNT) survives a resubmission of one task alone:
        // `sbatch --array=9` is an array of one task, still shard 9 of 16, not the whole tree.
        let alone = ["SLURM_ARRAY_TASK_ID": "9", "SLURM_ARRAY_TASK_COUNT": "1", "SLURM_ARRAY_TASK_MIN": "9",
                     "SLURM_ARRAY_TASK_MAX": "9"]
        #expect(try BatchShard.fromEnvironment(alone) == BatchShard(index: 0, count: 1, origin: "SLURM_ARRAY_TASK_ID"))
        #expect(try BatchShard.fromEnvironment(alone, count: 16) == BatchShard(index: 9, count: 16, origin: "SLURM_ARRAY_TASK_ID"))
        #expect(try BatchShard.fromEnvironment(alone.merging(["DOCCONVERT_SHARD_COUNT": "16"]) { $1 })?.description == "9/16")
        #expect(try BatchShard.fromEnvironment(["SLURM_ARRAY_TASK_ID": "16", "SLURM_ARRAY_TASK_MIN": "16",
                                                "SLURM_ARRAY_TASK_MAX": "16"], count: 16)?.index == 0, "ID 16 of 1-16")
        // An array larger than the fixed count would put two tasks on one shard: refused, saying so.
        #expect(throws: DocumentError.self) {
            try BatchShard.fromEnvironment(["SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "32",
                                            "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": "31"], count: 16)
        }
        // Every path belongs to exactly one of N shards, the same one every time, and all shards get work.
        let paths = (0..<2000).map { "home/user\($0 % 37)/Library/store-\($0).sqlite" }
        for count in [2, 3, 8] {
            var sizes = Array(repeating: 0, count: count)
            for path in paths {
                let owners = try (0..<count).filter { try BatchShard(index: $0, count: count).owns(path) }
                #expect(owners.count == 1)
                sizes[owners[0]] += 1
                #expect(BatchShard.bucket(of: path, count: count) == owners[0])
            }
            #expect(sizes.allSatisfy { $0 > paths.count / count / 2 }, "\(sizes)")
        }
        #expect(BatchShard.all.owns("anything"))
    }

    @Test("the library: a survey walks ahead for the progress total; reports come one at a time; cancel stops early")
    func library() async throws {
        try await withTemporaryDirectory { directory in
            let root = directory.appending("tree")
            let tree = try BatchTree(in: root, groups: 4)
            var options = BatchOptions()
            options.jobs = 1
            options.survey = true
            options.conversion.legacyPolicy = .keep
            let batch = BatchConverter(root: root, options: options)
            let seen = Locked<[BatchItem]>([])
            let summary = try await batch.run { item in seen.withValue { $0.append(item) } }
            let items = seen.withValue { $0 }
            #expect(Dictionary(uniqueKeysWithValues: items.map { ($0.source, $0.outcome.rawValue) }) == tree.expectedOutcomes)
            #expect(summary.items == items.count && !summary.interrupted)
            let progress = batch.progress
            #expect(progress.walkFinished && progress.surveyFinished)
            #expect(progress.surveyed >= 1 && progress.surveyed <= progress.found)
            #expect(progress.total?.isFinal == true && progress.total?.items == items.count && progress.done == items.count)

            // Cancelled before it starts: nothing is converted, the summary says so.
            let second = directory.appending("second")
            _ = try BatchTree(in: second, groups: 2)
            let cancelled = BatchConverter(root: second, options: options)
            cancelled.cancel()
            let stopped = try await cancelled.run { _ in }
            #expect(stopped.interrupted && stopped.count(.converted) == 0)
        }
    }

    @Test("a UIManagedDocument package given as the root is converted as the package it is, never entered")
    func packageAsRoot() async throws {
        try await withTemporaryDirectory { directory in
            let package = directory.appending("Ledger.moneywell")
            let storeFolder = package.appending("StoreContent")
            try FileSystem.createDirectory(storeFolder)
            let queue = try DatabaseQueue(path: storeFolder.appending("persistentStore").string)
            try await queue.write { db in
                try db.execute(sql: "CREATE TABLE account(name); INSERT INTO account VALUES ('cash'), ('bank')")
            }
            try queue.close()
            #expect(FileManager.default.createFile(atPath: package.appending("lockFile").string, contents: Data("x".utf8)))
            let before = try Fixtures.rowDigests(of: storeFolder.appending("persistentStore"))
            let files = try FileManager.default.subpathsOfDirectory(atPath: package.string).sorted()

            var options = BatchOptions()
            options.jobs = 1
            options.conversion.legacyPolicy = .keep
            let items = Locked<[BatchItem]>([])
            _ = try await BatchConverter(root: package, options: options).run { item in items.withValue { $0.append(item) } }
            let reported = items.withValue { $0 }
            #expect(reported.count == 1, "\(reported.map(\.source))")
            #expect(reported.first?.outcome == .converted)
            #expect(reported.first?.kind == .legacyStore(.uiManagedDocumentPackage))
            #expect(try FileManager.default.subpathsOfDirectory(atPath: package.string).sorted() == files,
                    "nothing was written inside the package")
            let bundles = try FileSystem.contentsOfDirectory(directory).filter { $0.hasSuffix(".mdz") }
            #expect(bundles.count == 1, "\(bundles)")
            if let name = bundles.first {
                let reader = try BundleReader(at: directory.appending(name))
                #expect(reader.entries.contains { $0.name == "AdditionalContent/lockFile" })
                #expect(try Fixtures.bundleDigests(directory.appending(name)) == before)
            }
        }
    }

    @Test("the walk holds one directory stream per level: a wide folder is streamed, not listed")
    func streamingWalk() async throws {
        try await withTemporaryDirectory { directory in
            let wide = directory.appending("wide")
            try FileManager.default.createDirectory(atPath: wide.string, withIntermediateDirectories: true)
            for index in 0..<3000 {
                _ = FileManager.default.createFile(atPath: wide.appending("f\(index).txt").string, contents: Data("x".utf8))
            }
            // Stopping after a few candidates works: the walk is lazy.
            var seen = 0
            BatchWalker(root: directory, startedAt: Date()).walk { _ in
                seen += 1
                return seen < 10
            }
            #expect(seen == 10)
            var all = Set<String>()
            BatchWalker(root: directory, startedAt: Date()).walk { candidate in
                all.insert(candidate.relativePath)
                return true
            }
            #expect(all.count == 3000)
        }
    }
}

/// A value shared between threads.
final class Locked<Value>: @unchecked Sendable {  // guarded by `lock`
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func withValue<T>(_ body: (inout Value) -> T) -> T {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
}
