import Foundation
import ManagedDocument
import SystemPackage
import TestSupport
import Testing
@testable import docconvert

/// What a new user meets first: relative roots, one JSON document on every outcome, messages in the user's terms,
/// numbers that agree, and exit statuses that follow docs/CLI.md's table.
@Suite("docconvert: the first hour")
struct FirstHourCommandTests {
    private static let samples = FilePath(#filePath).removingLastComponent().removingLastComponent()
        .removingLastComponent().appending("Samples/stores")
    private static let cliReference = FilePath(#filePath).removingLastComponent().removingLastComponent()
        .removingLastComponent().appending("docs/CLI.md")

    /// A fresh folder, removed afterwards.
    private func withDirectory(_ body: (FilePath) throws -> Void) throws {
        let directory = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory.string) }  // Squash cleanup error.
        try body(directory)
    }

    /// Copies a sample store into `folder` (created), under `name`.
    @discardableResult
    private func copySample(_ sample: String, to folder: FilePath, as name: String? = nil) throws -> FilePath {
        try FileManager.default.createDirectory(atPath: folder.string, withIntermediateDirectories: true)
        let target = folder.appending(name ?? sample)
        try FileManager.default.copyItem(atPath: Self.samples.appending(sample).string, toPath: target.string)
        return target
    }

    /// Standard output parsed as one JSON object; a failed expectation when it is not exactly one document.
    private func document(_ stdout: String, _ context: String) throws -> [String: Any] {
        let parsed = try? JSONSerialization.jsonObject(with: Data(stdout.utf8))
        return try #require(parsed as? [String: Any], "not one JSON document (\(context)): \(stdout.prefix(400))")
    }

    private func setWritable(_ path: FilePath, _ writable: Bool) throws {
        try FileManager.default.setAttributes([.posixPermissions: writable ? 0o755 : 0o555], ofItemAtPath: path.string)
    }

    // MARK: Item 1: relative roots

    @Test("batch converts under a relative root (., ./, ./sub, sub/..), reporting paths relative to it",
          arguments: [(".", "sub/Diary.sqlite"), ("./", "sub/Diary.sqlite"), ("./sub", "Diary.sqlite"),
                      ("sub/..", "sub/Diary.sqlite")])
    func relativeRoot(root: String, expectedSource: String) throws {
        try withDirectory { directory in
            try copySample("Diary.sqlite", to: directory.appending("sub"))
            let result = try Docconvert.run(["batch", root, "--legacy", "keep", "--quiet", "--json", "--jobs", "1"],
                                         in: directory)
            #expect(result.status == 0, "\(result.stderr)")
            let report = try document(result.stdout, "batch \(root)")
            let items = try #require(report["items"] as? [[String: Any]])
            let converted = items.filter { $0["outcome"] as? String == "converted" }
            #expect(converted.map { $0["source"] as? String } == [expectedSource], "\(items)")
            #expect(report["root"] as? String == FilePath(directory.string).appending(root).lexicallyNormalized().string
                    || (report["root"] as? String)?.hasPrefix(directory.string) == true)
            #expect(FileManager.default.fileExists(atPath: directory.appending("sub/Diary.mdz").string))
        }
    }

    // MARK: Item 2 and the JSON rule: one complete document, always

    @Test("query --json on an error prints one complete JSON document with the error, naming the bundle")
    func queryErrorsAreOneDocument() throws {
        try withDirectory { directory in
            let bundle = directory.appending("Notes.mdz").string
            #expect(try Docconvert.run(["create", bundle]).status == 0)
            for sql in ["DELETE FROM sqlite_master", "SELECT 1; SELECT 2", "SELEC 1", "   "] {
                let result = try Docconvert.run(["query", bundle, sql, "--json"])
                #expect(result.status == 64, "\(sql): \(result.stderr)")
                let error = try #require(try document(result.stdout, sql)["error"] as? [String: Any])
                #expect(error["code"] as? String == "invalidArgument")
                let message = try #require(error["message"] as? String)
                #expect(message.hasPrefix("\(bundle): "), "\(message)")
                #expect(!message.contains("Database.") && !message.contains("while executing"), "\(message)")
                #expect(result.stderr.contains("error: \(message)"), "\(result.stderr)")
            }
        }
    }

    @Test("every --json command prints one JSON document with an error object when it fails")
    func everyJSONCommandFailsWithOneDocument() throws {
        try withDirectory { directory in
            let missing = directory.appending("Missing.mdz").string
            let folder = directory.appending("migrations").string
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            let commands: [(arguments: [String], status: Int32, code: String)] = [
                (["inspect", missing, "--json"], 66, "notFound"),
                (["extract", missing, "--output", directory.appending("x.sqlite").string, "--json"], 66, "notFound"),
                (["query", missing, "SELECT 1", "--json"], 66, "notFound"),
                (["convert", directory.appending("Missing.sqlite").string, "--json"], 66, "notFound"),
                (["create", directory.appending("New.mdz").string, "--from", directory.appending("None.sqlite").string,
                  "--json"], 66, "notFound"),
                (["migrate", missing, "--migrations", folder, "--json"], 66, "notFound"),
                (["batch", directory.appending("nowhere").string, "--json"], 66, "notFound"),
                (["query", missing, "SELECT 1", "--cache-size", "0", "--json"], 64, "invalidArgument"),
                (["inspect", "--json"], 64, "invalidArgument"),
            ]
            for command in commands {
                let result = try Docconvert.run(command.arguments)
                #expect(result.status == command.status, "\(command.arguments): \(result.stderr)")
                let error = try document(result.stdout, "\(command.arguments)")["error"] as? [String: Any]
                #expect(error?["code"] as? String == command.code, "\(command.arguments): \(result.stdout)")
                #expect((error?["message"] as? String)?.isEmpty == false)
            }
            // verify reports failures inside its own document.
            let verified = try Docconvert.run(["verify", missing, "--json"])
            #expect(verified.status == 66)
            #expect(try document(verified.stdout, "verify")["ok"] as? Bool == false)
        }
    }

    @Test("batch --json whose report cannot be written still prints one document, with the error, and exits 73")
    func batchReportFailureIsOneDocument() throws {
        try withDirectory { directory in
            try copySample("Diary.sqlite", to: directory.appending("tree"))
            let notReport = directory.appending("notes.txt")
            try Data("shopping list\n".utf8).write(to: URL(fileURLWithPath: notReport.string))
            let refused = try Docconvert.run(["batch", directory.appending("tree").string, "--report", notReport.string,
                                           "--json", "--quiet"])
            #expect(refused.status == 73, "\(refused.stderr)")
            let error = try #require(try document(refused.stdout, "report refused")["error"] as? [String: Any])
            let message = try #require(error["message"] as? String)
            // Item 8: the file is named, the problem said in words, never Swift's decoding error.
            #expect(message.hasPrefix(notReport.string) && message.contains("not a batch report"), "\(message)")
            for word in ["DecodingError", "dataCorrupted", "Context(", "codingPath"] {
                #expect(!message.contains(word) && !refused.stderr.contains(word), "\(refused.stderr)")
            }
            #expect(try String(contentsOfFile: notReport.string, encoding: .utf8) == "shopping list\n")
        }
    }

    // MARK: Item 8: messages in the user's terms

    @Test("batch failure lines name the item once and show SQLite's message, not the statement the tool ran")
    func batchFailureLines() throws {
        try withDirectory { directory in
            let tree = directory.appending("tree")
            let store = try copySample("minimalTime.sqlite", to: tree.appending("c"), as: "trunc.sqlite")
            let bytes = try Data(contentsOf: URL(fileURLWithPath: store.string))
            try bytes.prefix(bytes.count / 2 + 100).write(to: URL(fileURLWithPath: store.string))
            let result = try Docconvert.run(["batch", tree.string, "--legacy", "keep", "--quiet"], in: directory)
            #expect(result.status == 65, "\(result.stdout)\(result.stderr)")
            let line = try #require(result.stdout.split(separator: "\n").first { $0.hasPrefix("failed") })
            #expect(line.contains("c/trunc.sqlite: "), "\(line)")
            #expect(line.components(separatedBy: "trunc.sqlite").count == 2, "the path once: \(line)")
            #expect(!line.contains(tree.string) && !line.contains("while executing") && !line.contains("PRAGMA"), "\(line)")
        }
    }

    @Test("batch on a folder the user cannot write says what to do, not to open it read-only")
    func batchReadOnlyFolder() throws {
        try withDirectory { directory in
            let tree = directory.appending("tree")
            try copySample("Diary.sqlite", to: tree.appending("locked"))
            try setWritable(tree.appending("locked"), false)
            defer { try? setWritable(tree.appending("locked"), true) }  // Squash: the folder is removed next.
            let result = try Docconvert.run(["batch", tree.string, "--legacy", "keep", "--quiet"], unprivileged: true)
            #expect(result.status == 65, "\(result.stdout)\(result.stderr)")
            let line = try #require(result.stdout.split(separator: "\n").first { $0.hasPrefix("failed") })
            #expect(!line.contains("read-only instead") && line.contains("writable"), "\(line)")
            #expect(line.contains("locked/Diary.mdz") && !line.contains(tree.string), "\(line)")
        }
    }

    @Test("the console's stop message speaks of the signal received")
    func stoppingMessage() {
        #expect(Batch.stoppingMessage(signal: SIGINT).contains("Ctrl-C again"))
        let terminated = Batch.stoppingMessage(signal: SIGTERM)
        #expect(!terminated.contains("Ctrl-C") && terminated.contains("SIGTERM"), "\(terminated)")
    }

    @Test("a loose SQLite store given as a bundle gets the command that converts it")
    func looseStoreAdvice() throws {
        try withDirectory { directory in
            let store = try copySample("Diary.sqlite", to: directory)
            let result = try Docconvert.run(["inspect", store.string])
            #expect(result.status == 65)
            #expect(result.stderr == "error: \(store): is a SQLite store, not a bundle; convert it with: docconvert convert \(store)\n")
        }
    }

    // MARK: Item 9: numbers that agree

    @Test("batch --dry-run plans the bytes the run reports, external data included")
    func dryRunCountsExternalData() throws {
        try withDirectory { directory in
            let tree = directory.appending("tree")
            try copySample("Diary.sqlite", to: tree)
            try FileManager.default.copyItem(atPath: Self.samples.appending(".Diary_SUPPORT").string,
                                             toPath: tree.appending(".Diary_SUPPORT").string)
            let plan = try Docconvert.run(["batch", tree.string, "--dry-run", "--json", "--quiet"])
            #expect(plan.status == 0, "\(plan.stderr)")
            let run = try Docconvert.run(["batch", tree.string, "--legacy", "keep", "--json", "--quiet"])
            #expect(run.status == 0, "\(run.stderr)")
            let planned = try #require(try document(plan.stdout, "plan")["summary"] as? [String: Any])["bytesIn"] as? Int
            let converted = try #require(try document(run.stdout, "run")["summary"] as? [String: Any])["bytesIn"] as? Int
            let store = try FileManager.default.attributesOfItem(atPath: tree.appending("Diary.sqlite").string)[.size] as? Int
            #expect(planned == converted, "planned \(String(describing: planned)), converted \(String(describing: converted))")
            #expect((converted ?? 0) > (store ?? 0), "the external data is counted")
        }
    }

    @Test("migrate into a folder that cannot be written exits 73, the status of cannotCreate")
    func migrateReadOnlyFolder() throws {
        try withDirectory { directory in
            let documents = directory.appending("documents")
            try FileManager.default.createDirectory(atPath: documents.string, withIntermediateDirectories: true)
            #expect(try Docconvert.run(["create", documents.appending("Notes.mdz").string]).status == 0)
            let migrations = directory.appending("migrations")
            try FileManager.default.createDirectory(atPath: migrations.string, withIntermediateDirectories: true)
            try Data("CREATE TABLE entry(id INTEGER PRIMARY KEY);\n".utf8)
                .write(to: URL(fileURLWithPath: migrations.appending("V1__create.sql").string))
            try setWritable(documents, false)
            defer { try? setWritable(documents, true) }  // Squash: the folder is removed next.
            let result = try Docconvert.run(["migrate", documents.string, "--migrations", migrations.string, "--json"],
                                         unprivileged: true)
            let report = try document(result.stdout, "migrate")
            let first = try #require((report["documents"] as? [[String: Any]])?.first)
            let code = (first["error"] as? [String: Any])?["code"] as? String
            #expect(code == "cannotCreate", "\(result.stdout)")
            let message = ((first["error"] as? [String: Any])?["message"] as? String) ?? ""
            #expect(message.contains("writable") && !message.contains("read-only"), "\(message)")
            #expect(result.status == 73, "\(result.stderr)")
        }
    }

    // MARK: The table of exit statuses

    /// docs/CLI.md's table of error codes: code to exit status.
    private func documentedStatuses() throws -> [String: Int32] {
        let text = try String(contentsOfFile: Self.cliReference.string, encoding: .utf8)
        let section = try #require(text.components(separatedBy: "### Error codes").dropFirst().first)
        var statuses: [String: Int32] = [:]
        for line in section.split(separator: "\n").prefix(while: { !$0.hasPrefix("## ") }) {
            let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count >= 3, cells[0].hasPrefix("`"), let status = Int32(cells[1]) else { continue }
            let code = cells[0].trimmingCharacters(in: CharacterSet(charactersIn: "`"))
            #expect(statuses[code] == nil, "\(code) is listed twice")
            statuses[code] = status
        }
        return statuses
    }

    @Test("docs/CLI.md's table gives every error code the exit status the program uses, and no other code")
    func exitStatusTable() throws {
        let documented = try documentedStatuses()
        let codes = DocumentError.Code.allCases
        #expect(codes.count > 40)
        for code in codes {
            #expect(documented[code.description] == DocConvert.exitStatus(for: code),
                    "\(code): the table says \(String(describing: documented[code.description])), the program \(DocConvert.exitStatus(for: code))")
        }
        #expect(Set(documented.keys) == Set(codes.map(\.description)))
    }

    @Test("a real error of each exit status exits with the status the table gives its code")
    func errorPathsExitWithTheirStatus() throws {
        let documented = try documentedStatuses()
        try withDirectory { directory in
            let bundle = directory.appending("Notes.mdz")
            #expect(try Docconvert.run(["create", bundle.string]).status == 0)
            let text = directory.appending("notes.txt")
            try Data("not a bundle at all, just words\n".utf8).write(to: URL(fileURLWithPath: text.string))
            let unreadable = directory.appending("Unreadable.mdz")
            try FileManager.default.copyItem(atPath: bundle.string, toPath: unreadable.string)
            try FileManager.default.setAttributes([.posixPermissions: 0o000], ofItemAtPath: unreadable.string)

            // 75: the document's lock held by another process (this one), as an app editing it does.
            let lockPath = directory.appending(".Notes.mdz.lock").string
            let lock = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
            #expect(lock >= 0 && flock(lock, LOCK_EX | LOCK_NB) == 0)
            defer { close(lock) }
            let migrations = directory.appending("migrations")
            try FileManager.default.createDirectory(atPath: migrations.string, withIntermediateDirectories: true)
            try Data("CREATE TABLE entry(id INTEGER PRIMARY KEY);\n".utf8)
                .write(to: URL(fileURLWithPath: migrations.appending("V1__create.sql").string))

            let cases: [(arguments: [String], code: String, unprivileged: Bool)] = [
                (["query", bundle.string, "DELETE FROM sqlite_master", "--json"], "invalidArgument", false),
                (["inspect", text.string, "--json"], "notAZipArchive", false),
                (["inspect", directory.appending("Missing.mdz").string, "--json"], "notFound", false),
                (["create", bundle.string, "--json"], "alreadyExists", false),
                (["inspect", unreadable.string, "--json"], "ioFailure", true),
                (["migrate", bundle.string, "--migrations", migrations.string, "--json"], "inUse", false),
            ]
            var seen: Set<Int32> = []
            for item in cases {
                let result = try Docconvert.run(item.arguments, unprivileged: item.unprivileged)
                let object = try document(result.stdout, "\(item.arguments)")
                let error = (object["error"] as? [String: Any])
                    ?? ((object["documents"] as? [[String: Any]])?.first?["error"] as? [String: Any])
                let code = try #require(error?["code"] as? String, "\(item.arguments): \(result.stdout)")
                #expect(code == item.code, "\(item.arguments): \(error ?? [:])")
                #expect(result.status == documented[code], "\(item.arguments): \(code) exits \(result.status)")
                #expect(!result.stderr.contains("read-only") && !result.stdout.contains("read-only"), "\(result.stdout)")
                seen.insert(result.status)
            }
            #expect(seen == [64, 65, 66, 73, 74, 75])
        }
    }
}
