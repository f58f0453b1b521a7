import Crypto
import Foundation
import Synchronization
import SystemPackage
import Testing
@_spi(Core) import MDZCore
import ManagedDocument
import TestSupport

/// The fleet at scale, through the command and the public API: plans walked once, the streaming merge of shard
/// reports, and the history of runs killed before they wrote their report.
@Suite("fleet at scale")
struct FleetScaleTests {
    /// `docconvert` with any subcommand, both pipes drained at once.
    static func docconvert(_ arguments: [String]) throws -> (status: Int32, stdout: String, stderr: String) {
        try Docconvert.run(arguments, environment: ProcessInfo.processInfo.environment
            .filter { !$0.key.hasPrefix("SLURM_") && $0.key != "JOB_COMPLETION_INDEX" && $0.key != "DOCCONVERT_SHARD_COUNT" })
    }

    /// Every path under `root`, relative, sorted.
    static func listing(_ root: FilePath) -> [String] {
        (FileManager.default.enumerator(atPath: root.string)?.allObjects as? [String] ?? []).sorted()
    }

    /// The SHA-256 of a file's bytes.
    static func sha256(_ path: FilePath) throws -> String {
        SHA256.hash(data: try Data(contentsOf: URL(fileURLWithPath: path.string))).map { String(format: "%02x", $0) }.joined()
    }

    /// The items of several reports, by source; fails on a source in two of them.
    static func union(_ reports: [BatchReport]) -> [String: BatchItem] {
        var items: [String: BatchItem] = [:]
        for item in reports.flatMap(\.items) {
            #expect(items.updateValue(item, forKey: item.source) == nil, "\(item.source) in two reports")
        }
        return items
    }

    @Test("a plan walked once: shards converting from it report what shards walking the tree report; plans are never items")
    func planMatchesWalk() async throws {
        try await withTemporaryDirectory { directory in
            let walked = directory.appending("walked"), planned = directory.appending("planned")
            _ = try BatchTree(in: walked, groups: 6)
            let tree = try BatchTree(in: planned, groups: 6)
            // The plan inside the tree it describes: its first bytes say what it is, so no walk takes it for an item.
            let plan = planned.appending("plans/tree.plan")
            try FileManager.default.createDirectory(atPath: planned.appending("plans").string, withIntermediateDirectories: true)
            let made = try Self.docconvert(["batch", planned.string, "--plan-only", plan.string, "--json"])
            #expect(made.status == 0, "\(made.stderr)")
            let header = try BatchPlan(at: plan).header
            let storeItems = tree.expectedOutcomes.values.filter { $0 == "converted" || $0 == "failed" }.count
            #expect(header.items == tree.expectedOutcomes.count && header.stores == storeItems,
                    "\(header.items) items, \(header.stores) stores")
            #expect(made.stdout.contains("\"sha256\" : \"\(header.sha256)\""), "\(made.stdout)")

            var reports: [String: [BatchReport]] = [:]
            for (name, root) in [("walked", walked), ("planned", planned)] {
                for index in 0..<3 {
                    let path = directory.appending("\(name)-\(index).json")
                    let run = try Self.docconvert(["batch", root.string, "--shard", "\(index)/3", "--jobs", "1", "--quiet",
                                                   "--report", path.string] + (name == "planned" ? ["--plan", plan.string] : []))
                    #expect(run.status == 65 || run.status == 0, "\(run.stderr)")  // 65: a corrupt store in the shard
                    #expect(run.stderr.contains("taking the items from the plan") == (name == "planned"))
                    reports[name, default: []].append(try BatchReport.read(from: path))
                }
            }
            let fromWalk = Self.union(reports["walked"]!), fromPlan = Self.union(reports["planned"]!)
            #expect(fromPlan.keys.sorted() == fromWalk.keys.sorted())
            for (source, walkedItem) in fromWalk {
                let item = fromPlan[source]
                // > Two stores with one stem: the first converted gets STEM.mdz, the other NAME.mdz (docs/CLI.md);
                // > which is first is not fixed when they convert at once (three threads a job), so the pair's
                // > names are compared as a set below.
                let twin = FilePath(source).stem == "Twin"
                #expect(item?.outcome == walkedItem.outcome && item?.kind == walkedItem.kind
                        && (twin || item?.bundle == walkedItem.bundle)
                        && item?.bytesIn == walkedItem.bytesIn && item?.rows == walkedItem.rows
                        && item?.reason == walkedItem.reason,
                        "\(source): walked \(walkedItem), planned \(String(describing: item))")
            }
            for items in [fromWalk, fromPlan] {
                let twins = Dictionary(grouping: items.values.filter { FilePath($0.source).stem == "Twin" }) {
                    FilePath($0.source).removingLastComponent().string
                }
                #expect(twins.count == tree.expectedOutcomes.keys.filter { FilePath($0).stem == "Twin" }.count / 2)
                for (folder, pair) in twins {
                    let names = Set(pair.compactMap { $0.bundle.map { FilePath($0).lastComponent?.string ?? "" } })
                    let expected = Set(["Twin.mdz"] + pair.map { FilePath($0.source).lastComponent!.string + ".mdz" })
                    #expect(pair.count == 2 && names.count == 2 && names.isSubset(of: expected) && names.contains("Twin.mdz"),
                            "\(folder): \(pair.map { "\($0.source) -> \($0.bundle ?? "none")" })")
                }
            }
            #expect(Dictionary(uniqueKeysWithValues: fromPlan.map { ($0.key, $0.value.outcome.rawValue) }) == tree.expectedOutcomes)

            // A rerun from the same plan finds everything done.
            let again = try Self.docconvert(["batch", planned.string, "--plan", plan.string, "--quiet", "--json"])
            let rerun = try JSONDecoder.iso8601.decode(BatchReport.self, from: Data(again.stdout.utf8))
            #expect(rerun.summary.count(.converted) == 0 && rerun.summary.count(.alreadyDone) == tree.stores.count,
                    "\(rerun.summary.outcomes), \(rerun.items.filter { $0.outcome == .notAStore && tree.stores[$0.source] != nil })")
        }
    }

    @Test("an old plan converts nothing wrongly: stores gone, converted, changed or added since are each handled")
    func stalePlan() async throws {
        try await withTemporaryDirectory { directory in
            let root = directory.appending("tree")
            let tree = try BatchTree(in: root, groups: 2)
            let plan = directory.appending("tree.plan")
            #expect(try Self.docconvert(["batch", root.string, "--plan-only", plan.string, "--quiet"]).status == 0)
            let stores = tree.stores.keys.sorted()
            let (gone, convertedSince, changed) = (stores[0], stores[1], stores[2])
            // Gone (with its sidecars), converted by a run that did not use the plan, turned into a text file.
            for name in try FileManager.default.contentsOfDirectory(atPath: root.appending(gone).removingLastComponent().string)
            where name.hasPrefix(FilePath(gone).lastComponent!.string) {
                try FileManager.default.removeItem(atPath: root.appending(gone).removingLastComponent().appending(name).string)
            }
            #expect(try Self.docconvert(["convert", root.appending(convertedSince).string]).status == 0)
            if tree.stores[changed]!.kind != "uimanageddocument-package" {
                for suffix in ["-wal", "-shm", "-journal"] { try? FileManager.default.removeItem(atPath: root.appending(changed).string + suffix) }
                try Data("not a store any more\n".utf8).write(to: URL(fileURLWithPath: root.appending(changed).string))
            }
            let unchanged = FileManager.default.fileExists(atPath: root.appending(changed).string + "/StoreContent")
                ? "" : try Self.sha256(root.appending(changed))
            // Added since: a plan does not know it.
            try FileManager.default.copyItem(atPath: root.appending(stores[3]).string, toPath: root.appending("added.sqlite").string)

            let run = try Self.docconvert(["batch", root.string, "--plan", plan.string, "--quiet", "--json"])
            let report = try JSONDecoder.iso8601.decode(BatchReport.self, from: Data(run.stdout.utf8))
            let items = Dictionary(uniqueKeysWithValues: report.items.map { ($0.source, $0) })
            #expect(items[gone]?.outcome == .notAStore && items[gone]?.reason?.contains("changed since the plan") == true,
                    "\(String(describing: items[gone]))")
            #expect(items[convertedSince]?.outcome == .alreadyDone, "\(String(describing: items[convertedSince]))")
            if tree.stores[changed]!.kind != "uimanageddocument-package" {
                #expect(items[changed]?.outcome == .notAStore && items[changed]?.reason?.contains("not a store any more") == true)
                #expect(try Self.sha256(root.appending(changed)) == unchanged, "the changed file was touched")
            }
            #expect(items["added.sqlite"] == nil && FileManager.default.fileExists(atPath: root.appending("added.sqlite").string))
            for source in stores.dropFirst(4) { #expect(items[source]?.outcome == .converted, "\(source)") }
        }
    }

    @Test("a damaged, crafted or foreign plan is refused whole before anything is converted")
    func damagedPlans() async throws {
        try await withTemporaryDirectory { directory in
            let root = directory.appending("tree")
            let tree = try BatchTree(in: root, groups: 1)
            let plan = directory.appending("tree.plan")
            #expect(try Self.docconvert(["batch", root.string, "--plan-only", plan.string, "--quiet"]).status == 0)
            let text = try String(contentsOfFile: plan.string, encoding: .utf8)
            var lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
            let before = Self.listing(root)

            func refused(_ content: String, _ expected: Int32, _ words: String) throws {
                let bad = directory.appending("bad.plan")
                try Data(content.utf8).write(to: URL(fileURLWithPath: bad.string))
                let run = try Self.docconvert(["batch", root.string, "--plan", bad.string, "--quiet"])
                #expect(run.status == expected && run.stderr.contains(words), "\(run.status): \(run.stderr)")
                #expect(Self.listing(root) == before, "something was converted")
            }
            // Cut short, a byte changed, a line dropped, not a plan at all.
            try refused(String(text.dropLast(40)), 65, "damaged batch plan")
            try refused(text.replacingOccurrences(of: "\"bytes\":", with: "\"bytes\": "), 65, "damaged batch plan")
            try refused(([lines[0]] + lines.dropFirst(2)).joined(separator: "\n"), 65, "damaged batch plan")
            try refused("{\"hello\": 1}\n", 65, "not a batch plan")
            // A plan whose checksum is right but that names a path outside the root.
            lines[1] = "{\"bytes\":1,\"candidate\":\"store\",\"kind\":\"sqlite-store\",\"source\":\"../outside.sqlite\"}"
            let items = lines.dropFirst().joined(separator: "\n")
            let digest = SHA256.hash(data: Data(items.utf8)).map { String(format: "%02x", $0) }.joined()
            let header = lines[0].replacingOccurrences(of: #""sha256":"[0-9a-f]{64}""#, with: "\"sha256\":\"\(digest)\"",
                                                       options: .regularExpression)
            try refused(header + "\n" + items, 65, "not a path inside the root")
            // Missing; and --plan-only with options that belong to the runs.
            let missing = try Self.docconvert(["batch", root.string, "--plan", directory.appending("none.plan").string])
            #expect(missing.status == 66, "\(missing.stderr)")
            let usage = try Self.docconvert(["batch", root.string, "--plan-only", plan.string, "--shard", "0/2"])
            #expect(usage.status == 64 && usage.stderr.contains("--shard"), "\(usage.stderr)")
            #expect(!tree.stores.isEmpty)
        }
    }

    @Test("the library: writePlan walks once and counts what it finds; a run from the plan converts its shard's share")
    func libraryPlan() async throws {
        try await withTemporaryDirectory { directory in
            let root = directory.appending("tree")
            let tree = try BatchTree(in: root, groups: 2)
            let planner = BatchConverter(root: root)
            let header = try #require(try planner.writePlan(to: directory.appending("tree.plan"), generator: "test"))
            #expect(planner.progress.found == header.items && planner.progress.walkFinished)
            var converted: Set<String> = []
            for index in 0..<2 {
                var options = BatchOptions()
                options.shard = try BatchShard(index: index, count: 2)
                // Opened for the whole tree: the run opens it again for its share.
                options.plan = try BatchPlan(at: directory.appending("tree.plan"), shard: index == 0 ? .all : options.shard)
                options.conversion.legacyPolicy = .keep
                let items = Mutex<[BatchItem]>([])
                _ = try await BatchConverter(root: root, options: options).run { item in items.withLock { $0.append(item) } }
                for item in items.withLock({ $0 }) {
                    #expect(options.shard.owns(item.source))
                    if item.outcome == .converted { converted.insert(item.source) }
                }
            }
            #expect(converted == Set(tree.stores.keys))
        }
    }
}

extension JSONDecoder {
    static var iso8601: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }
}
