import Foundation
import SystemPackage
import TestSupport
import Testing

/// Stores that share a stem (`Notes.db`, `Notes.sqlite`): a dry run and a plan name the bundles the run makes.
@Suite("docconvert: twin bundle names")
struct TwinNamesCommandTests {
    /// Two folders (`x`, `a b`), each with `Notes.db` and `Notes.sqlite`: every twin pair, and a lone store.
    private static func makeTree(at root: FilePath) throws -> [String] {
        let stores = ["x/Notes.db", "x/Notes.sqlite", "a b/Notes.db", "a b/Notes.sqlite", "a b/Other.sqlite"]
        for store in stores {
            try Fixtures.makeListStore(at: root.appending(store), table: "t", column: "x", values: [store])
        }
        return stores
    }

    /// Source → bundle of the items in a batch's JSON output.
    private static func names(inReport stdout: String) throws -> [String: String] {
        let report = try #require(try JSONSerialization.jsonObject(with: Data(stdout.utf8)) as? [String: Any],
                                  "not JSON: \(stdout.prefix(300))")
        var names: [String: String] = [:]
        for item in report["items"] as? [[String: Any]] ?? [] {
            if let source = item["source"] as? String, let bundle = item["bundle"] as? String { names[source] = bundle }
        }
        return names
    }

    /// Source → bundle of the store items of a plan file.
    private static func names(inPlan plan: FilePath) throws -> [String: String] {
        let lines = try String(contentsOfFile: plan.string, encoding: .utf8).split(separator: "\n").dropFirst()
        var names: [String: String] = [:]
        for line in lines {
            let item = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            if item?["candidate"] as? String == "store", let source = item?["source"] as? String {
                names[source] = item?["bundle"] as? String ?? "(none)"
            }
        }
        return names
    }

    /// Source → bundle as the tree has them: every `.mdz` under `root`, by the source its provenance names (python's
    /// zipfile reads the metadata) and the row its store holds, which must be that source's.
    private static func made(under root: FilePath) throws -> [String: String] {
        let output = try Python.run("""
            import json, os, sqlite3, sys, tempfile, zipfile
            root = sys.argv[1]
            scratch = tempfile.mkdtemp()
            for folder, _, names in os.walk(root):
                if 'docconvert-backup' in folder: continue
                for name in sorted(names):
                    if not name.endswith('.mdz'): continue
                    archive = zipfile.ZipFile(os.path.join(folder, name))
                    source = json.loads(archive.read('DocumentMetadata.json'))['provenance']['fileName']
                    copy = os.path.join(scratch, 'store')
                    with open(copy, 'wb') as out: out.write(archive.read('StoreContent/persistentStore'))
                    (row,) = sqlite3.connect(copy).execute('SELECT x FROM t').fetchone()
                    os.remove(copy)
                    relative = os.path.relpath(folder, root)
                    print('%s\\t%s\\t%s' % (os.path.join(relative, source), os.path.join(relative, name), row))
            """, [root.string])
        var made: [String: String] = [:]
        for line in output.split(separator: "\n") {
            let fields = line.split(separator: "\t").map(String.init)
            guard fields.count == 3 else { continue }
            #expect(fields[0] == fields[2], "\(fields[1]) holds the row of \(fields[2]), its provenance names \(fields[0])")
            made[fields[0]] = fields[1]
        }
        return made
    }

    @Test("a dry run names each bundle as the run makes it, in a folder whose name has a space too")
    func dryRunNamesWhatTheRunMakes() throws {
        try LegacyFiles.withDirectory { directory in
            let tree = directory.appending("tree")
            let stores = try Self.makeTree(at: tree)
            let dry = try Docconvert.run(["batch", tree.string, "--dry-run", "--json"])
            #expect(dry.status == 0, "\(dry.stderr)")
            let promised = try Self.names(inReport: dry.stdout)
            #expect(Set(promised.keys) == Set(stores), "\(promised)")
            #expect(Set(promised.values).count == stores.count, "two stores promised one bundle: \(promised)")

            let run = try Docconvert.run(["batch", tree.string, "--jobs", "2", "--json"])
            #expect(run.status == 0, "\(run.stderr)")
            #expect(try Self.names(inReport: run.stdout) == promised)
            #expect(try Self.made(under: tree) == promised)
        }
    }

    @Test("a plan names each store's bundle, and the run of the plan makes exactly those")
    func planNamesWhatTheRunMakes() throws {
        try LegacyFiles.withDirectory { directory in
            let tree = directory.appending("tree")
            let stores = try Self.makeTree(at: tree)
            let plan = directory.appending("tree.plan")
            let planned = try Docconvert.run(["batch", tree.string, "--plan-only", plan.string, "--quiet"])
            #expect(planned.status == 0, "\(planned.stderr)")
            let promised = try Self.names(inPlan: plan)
            #expect(Set(promised.keys) == Set(stores) && Set(promised.values).count == stores.count, "\(promised)")

            let run = try Docconvert.run(["batch", tree.string, "--plan", plan.string, "--jobs", "2", "--quiet"])
            #expect(run.status == 0, "\(run.stderr)")
            #expect(try Self.made(under: tree) == promised)
        }
    }

    @Test("a store converted as NAME.mdz is found there once its twin is gone, not converted again as STEM.mdz")
    func earlierNameKept() throws {
        try LegacyFiles.withDirectory { directory in
            let tree = directory.appending("tree")
            _ = try Self.makeTree(at: tree)
            let first = try Docconvert.run(["batch", tree.string, "--legacy", "keep", "--quiet"])
            #expect(first.status == 0, "\(first.stderr)")
            let made = try Self.made(under: tree)
            #expect(made["x/Notes.sqlite"] == "x/Notes.sqlite.mdz", "\(made)")
            for gone in ["x/Notes.db", "x/Notes.mdz"] { try FileManager.default.removeItem(atPath: tree.appending(gone).string) }

            let dry = try Docconvert.run(["batch", tree.string, "--legacy", "keep", "--dry-run", "--json"])
            #expect(try Self.names(inReport: dry.stdout)["x/Notes.sqlite"] == "x/Notes.sqlite.mdz")
            let again = try Docconvert.run(["batch", tree.string, "--legacy", "keep", "--json"])
            #expect(again.status == 0, "\(again.stderr)")
            let report = try JSONSerialization.jsonObject(with: Data(again.stdout.utf8)) as? [String: Any]
            let item = (report?["items"] as? [[String: Any]])?.first { $0["source"] as? String == "x/Notes.sqlite" }
            #expect(item?["outcome"] as? String == "skipped-already-done" && item?["bundle"] as? String == "x/Notes.sqlite.mdz",
                    "\(item ?? [:])")
            #expect(!FileManager.default.fileExists(atPath: tree.appending("x/Notes.mdz").string))
        }
    }
}
