import ArgumentParser
import Foundation
import ManagedDocument
import SystemPackage
import TestSupport
import Testing
@testable import docconvert

@Suite("docconvert commands")
struct CommandTests {
    private func temporaryDirectory() throws -> FilePath { try CLI.temporaryDirectory() }

    private func execute(_ arguments: [String]) throws -> (status: Int32, stdout: String, stderr: String) {
        try Docconvert.run(arguments)
    }

    @Test("arguments parse into the commands, and bad ones are usage errors")
    func parsing() throws {
        let create = try DocConvert.parseAsRoot(["create", "a.mdz", "--compression", "store"])
        #expect(create is Create)
        let verify = try DocConvert.parseAsRoot(["verify", "a.mdz", "b.mdz", "--json", "--quick"]) as? Verify
        #expect(verify?.bundles == ["a.mdz", "b.mdz"])
        #expect(throws: (any Error).self) { try DocConvert.parseAsRoot(["extract", "a.mdz"]) }
        #expect(throws: (any Error).self) { try DocConvert.parseAsRoot(["create", "a.mdz", "--level", "12"]) }
        do {
            _ = try DocConvert.parseAsRoot(["extract", "a.mdz", "--output", "x", "--directory", "y"])
            Issue.record("both --output and --directory were accepted")
        } catch {
            #expect(DocConvert.exitCode(for: error).rawValue == 64)
        }
    }

    @Test("create, inspect --json, verify and extract work end to end in the built binary")
    func endToEnd() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory.string) }  // Squash cleanup error.
        let bundle = directory.appending("Notes.mdz").string
        let created = try execute(["create", bundle, "--model-name", "Notes", "--model-version", "2"])
        #expect(created.status == 0, "\(created.stderr)")
        #expect(created.stdout.hasPrefix("created \(bundle)"))

        let inspected = try execute(["inspect", bundle, "--json"])
        #expect(inspected.status == 0)
        let json = try JSONSerialization.jsonObject(with: Data(inspected.stdout.utf8)) as? [String: Any]
        #expect(json?["mediaType"] as? String == BundleLayout.defaultMediaType)
        let metadata = json?["metadata"] as? [String: Any]
        #expect((metadata?["model"] as? [String: Any])?["name"] as? String == "Notes")
        #expect((json?["entries"] as? [[String: Any]])?.first?["name"] as? String == "mimetype")

        let verified = try execute(["verify", bundle])
        #expect(verified.status == 0)
        #expect(verified.stdout.hasPrefix("ok: "))

        let store = directory.appending("Notes.sqlite").string
        let extracted = try execute(["extract", bundle, "--output", store])
        #expect(extracted.status == 0, "\(extracted.stderr)")
        #expect(FileManager.default.fileExists(atPath: store))

        let again = try execute(["create", bundle])
        #expect(again.status == 73)
        #expect(again.stderr.hasPrefix("error: \(bundle): already exists"))
        #expect(again.stderr.split(separator: "\n").count == 1)
    }

    @Test("a damaged bundle is one error line and exit status 65; a missing one is 66; verify goes on past failures")
    func failures() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory.string) }  // Squash cleanup error.
        let good = directory.appending("Good.mdz").string
        #expect(try execute(["create", good]).status == 0)
        let bad = directory.appending("Bad.mdz").string
        var bytes = Array(try Data(contentsOf: URL(fileURLWithPath: good)))
        bytes[40] ^= 0xFF  // inside the media type: its CRC no longer matches
        try Data(bytes).write(to: URL(fileURLWithPath: bad))

        let inspected = try execute(["inspect", bad])
        #expect(inspected.status == 65)
        #expect(inspected.stderr.hasPrefix("error: \(bad): mimetype: "))

        let missing = try execute(["inspect", directory.appending("nope.mdz").string])
        #expect(missing.status == 66)

        let verified = try execute(["verify", "--json", bad, good])
        #expect(verified.status == 65)
        let json = try JSONSerialization.jsonObject(with: Data(verified.stdout.utf8)) as? [String: Any]
        #expect(json?["ok"] as? Bool == false)
        let items = json?["bundles"] as? [[String: Any]]
        #expect(items?.count == 2)
        #expect(items?.last?["ok"] as? Bool == true)
        #expect((items?.first?["error"] as? [String: Any])?["code"] as? String == "checksumMismatch")
    }

    @Test("messages say what is wrong: a negative timeout, an output folder that is a file, an extract folder that is a link")
    func messagesSayWhatIsWrong() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory.string) }  // Squash cleanup error.
        let bundle = directory.appending("Notes.mdz")
        #expect(try execute(["create", bundle.string]).status == 0)

        let negative = try execute(["convert", bundle.string, "--busy-timeout", "-1"])
        #expect(negative.status == 64)
        #expect(negative.stderr.contains("must not be negative"), "\(negative.stderr)")
        let batchNegative = try execute(["batch", directory.string, "--busy-timeout", "-1", "--dry-run"])
        #expect(batchNegative.stderr.contains("must not be negative"), "\(batchNegative.stderr)")
        let migrateNegative = try execute(["migrate", bundle.string, "--migrations", directory.string, "--lock-timeout", "-1"])
        #expect(migrateNegative.stderr.contains("must not be negative"), "\(migrateNegative.stderr)")

        let file = directory.appending("afile")
        #expect(FileManager.default.createFile(atPath: file.string, contents: Data("x".utf8)))
        let intoFile = try execute(["create", file.appending("out.mdz").string])
        #expect(intoFile.status == 73)
        #expect(intoFile.stderr.contains("is a file, not a folder"), "\(intoFile.stderr)")

        let store = directory.appending("Legacy.sqlite")
        let made = Process()
        made.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        made.arguments = ["sqlite3", store.string, "CREATE TABLE t(x); INSERT INTO t VALUES (1);"]
        try made.run()
        made.waitUntilExit()
        let occupied = directory.appending("Occupied.mdz")
        #expect(FileManager.default.createFile(atPath: occupied.string, contents: Data("not a bundle".utf8)))
        let conflict = try execute(["convert", store.string, "--output", occupied.string, "--legacy", "keep"])
        #expect(conflict.status == 73)
        #expect(conflict.stderr.components(separatedBy: "not a zip archive").count == 2,
                "the reason is said once: \(conflict.stderr)")

        let empty = directory.appending("empty")
        try FileManager.default.createDirectory(atPath: empty.string, withIntermediateDirectories: true)
        let link = directory.appending("link")
        try FileManager.default.createSymbolicLink(atPath: link.string, withDestinationPath: empty.string)
        let intoLink = try execute(["extract", bundle.string, "--directory", link.string])
        #expect(intoLink.status != 0)
        #expect(intoLink.stderr.contains("is a symbolic link"), "\(intoLink.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: empty.string).isEmpty)
    }

    @Test("--help teaches and --version answers")
    func help() throws {
        let help = try execute(["--help"])
        #expect(help.stdout.contains("SUBCOMMANDS"))
        #expect(help.stdout.contains("Exit status"))
        let version = try execute(["--version"])
        #expect(version.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == ManagedDocumentVersion.string)
        // The binary answers `--version` alone before parsing: exactly what the parser prints for it, and for
        // `--version` after a subcommand (which still goes through the parser).
        let parsed = try #require(throws: (any Error).self) { try DocConvert.parseAsRoot(["--version"]) }
        #expect(DocConvert.exitCode(for: parsed).rawValue == 0)
        #expect(version.stdout == DocConvert.fullMessage(for: parsed) + "\n")
        #expect(version.stderr.isEmpty && version.status == 0)
        let afterSubcommand = try execute(["inspect", "--version"])
        #expect(afterSubcommand.stdout == version.stdout && afterSubcommand.status == 0)
    }
}
