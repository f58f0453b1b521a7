import Foundation
import SystemPackage
import TestSupport
import Testing

/// What `docconvert` prints for a person: a query's text output that reads back unambiguously, a dry run that names
/// what it skips, counts in the right number, and a word about links a run left dangling.
@Suite("docconvert says things plainly")
struct PlainWordsCommandTests {
    @Test("query's text output: control characters and backslashes escaped, the string 'NULL' told from a null, text that reads as a blob marked")
    func queryText() throws {
        let folder = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: folder.string) }  // Squash cleanup error.
        let store = folder.appending("values.sqlite").string
        let made = try execute("sqlite3", [store, """
            CREATE TABLE "t\tab"(v);
            INSERT INTO "t\tab" VALUES ('NULL'), (NULL), ('line one' || char(10) || 'line two'), ('a' || char(9) || 'b'),
                ('back\\slash'), ('bell' || char(7) || char(13)), (x'00'), (x'0001'), ('<blob 2 bytes>'), ('ünï'), ('\\NULL');
            """])
        try #require(made.status == 0, "\(made.stderr)")
        let bundle = folder.appending("values.mdz").string
        try #require(try Docconvert.run(["create", bundle, "--from", store]).status == 0)
        let text = try Docconvert.run(["query", bundle, "SELECT v AS \"v\tcolumn\" FROM \"t\tab\" ORDER BY rowid"])
        #expect(text.status == 0, "\(text.stderr)")
        #expect(text.stdout == """
            v\\tcolumn
            \\NULL
            NULL
            line one\\nline two
            a\\tb
            back\\\\slash
            bell\\x07\\r
            <blob 1 byte>
            <blob 2 bytes>
            \\<blob 2 bytes>
            ünï
            \\\\NULL

            """, "\(text.stdout)")
        // > --json is unchanged: the string and the null as themselves.
        let json = try Docconvert.run(["query", "--json", bundle, "SELECT v FROM \"t\tab\" ORDER BY rowid LIMIT 2"])
        #expect(json.stdout.contains("[\"NULL\"]") && json.stdout.contains("[null]"), "\(json.stdout)")
    }

    @Test("batch: a dry run names what it skips and why; a run's summary says how to see them; a link left dangling is reported; one table, one row")
    func batchWords() throws {
        let folder = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: folder.string) }  // Squash cleanup error.
        let tree = folder.appending("tree")
        try FileManager.default.createDirectory(atPath: tree.appending("links").string, withIntermediateDirectories: true)
        let made = try execute("sqlite3", [tree.appending("One.sqlite").string, "CREATE TABLE t(x); INSERT INTO t VALUES (1)"])
        try #require(made.status == 0, "\(made.stderr)")
        try Data("not a store\n".utf8).write(to: URL(fileURLWithPath: tree.appending("notes.txt").string))
        try FileManager.default.createSymbolicLink(atPath: tree.appending("links/one.sqlite").string,
                                                   withDestinationPath: "../One.sqlite")
        try FileManager.default.createSymbolicLink(atPath: tree.appending("links/elsewhere.sqlite").string,
                                                   withDestinationPath: "/nonexistent/elsewhere.sqlite")

        let dry = try Docconvert.run(["batch", tree.string, "--dry-run", "--quiet"])
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stdout.contains("not-a-store           notes.txt: not a SQLite database"), "\(dry.stdout)")
        #expect(dry.stdout.contains("not-a-store           links/one.sqlite: a symbolic link (not followed)"), "\(dry.stdout)")
        #expect(!dry.stdout.contains("--verbose lists them"), "\(dry.stdout)")

        let run = try Docconvert.run(["batch", tree.string, "--quiet"])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains(" -> One.mdz (sqlite, ") && run.stdout.contains(", 1 row, legacy in "), "\(run.stdout)")
        #expect(run.stdout.contains("not-a-store           3 (--verbose lists them and why)"), "\(run.stdout)")
        #expect(run.stderr.contains("link links/one.sqlite -> ../One.sqlite now dangles: its target was moved into docconvert-backup/")
                && run.stderr.contains("once it was converted into One.mdz"), "\(run.stderr)")
        #expect(!run.stderr.contains("elsewhere"), "a link that dangled before the run is not the run's doing: \(run.stderr)")

        let convert = try Docconvert.run(["verify", tree.appending("One.mdz").string])
        #expect(convert.stdout.contains("1 table, 1 row,"), "\(convert.stdout)")
    }
}

/// `scripts/image.sh`, as a new user meets it: every tool it needs is checked before anything is built.
@Suite("the container image script checks its tools first")
struct ImageToolCheckTests {
    @Test("image.sh --check, with podman's runtime hidden: at once, exit 69, every missing tool and the apt-get line that installs it")
    func missingToolsFirst() throws {
        let root = FilePath(#filePath).removingLastComponent().removingLastComponent().removingLastComponent()
        let folder = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: folder.string) }  // Squash cleanup error.
        // > A PATH of the system's tools but runc (and podman, which CI does not install): what a fresh machine has.
        let bin = folder.appending("bin")
        try FileManager.default.createDirectory(atPath: bin.string, withIntermediateDirectories: true)
        for tool in ["bash", "env", "ldd", "strip", "swift", "id", "dirname", "cat", "sed", "grep"] {
            for folder in ["/usr/bin", "/bin", "/opt/swift/usr/bin"]
            where FileManager.default.isExecutableFile(atPath: folder + "/" + tool) {
                try? FileManager.default.createSymbolicLink(atPath: bin.appending(tool).string, withDestinationPath: folder + "/" + tool)
                break
            }
        }
        var environment = ProcessInfo.processInfo.environment
        environment["PATH"] = bin.string
        environment["IMAGE_ENGINE"] = "podman"
        let started = Date()
        let check = try execute(root.appending("scripts/image.sh").string, ["--check"], environment: environment)
        #expect(Date().timeIntervalSince(started) < 10, "the check must come before any build")
        #expect(check.status == 69, "\(check.stdout) \(check.stderr)")
        #expect(check.stderr.contains("missing: podman, runc") && check.stderr.contains("apt-get install podman runc"),
                "\(check.stderr)")
    }
}
