import Foundation
import GRDB
import SystemPackage
import TestSupport
import Testing

/// The built `docconvert` on bundles whose metadata says absurd numbers: exit 65 with one `error:` line, never a
/// signal; and a bundle that declares a large store as one segment is read within a bounded memory.
@Suite("docconvert on absurd metadata numbers: 65, never a crash; memory bounded whatever a bundle declares")
struct HostileMetadataCommandTests {
    /// A store of about `megabytes` MiB of compressible text rows, as a bundle `docconvert create` writes it.
    private static func makeBundle(in directory: FilePath, megabytes: Int = 2) throws -> String {
        let store = directory.appending("store.sqlite").string
        try Fixtures.makeStore(at: FilePath(store), journalMode: "OFF") { queue in
            try queue.write { db in
                try db.execute(sql: "CREATE TABLE note(id INTEGER PRIMARY KEY, body TEXT)")
                try db.execute(sql: """
                    WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
                    INSERT INTO note(id, body) SELECT i, printf('%08d ', i) || hex(randomblob(8))
                    || replace(printf('%.480c', '*'), '*', 'note ' || (i % 97) || ' ') FROM n
                    """, arguments: [megabytes * 256])
            }
        }
        let bundle = directory.appending("Doc.mdz").string
        // > Version 2: the absurd numbers are written into the metadata's segment records, which it holds.
        let created = try Docconvert.run(["create", bundle, "--from", store, "--format-version", "2"])
        #expect(created.status == 0, "\(created.stderr)")
        try FileManager.default.removeItem(atPath: store)
        return bundle
    }

    /// The store's size and SHA-256, as the metadata says.
    private static func storeFacts(_ bundle: String) throws -> (size: Int64, sha256: String) {
        let line = try Python.run("""
            import hashlib, json, sys, zipfile
            archive = zipfile.ZipFile(sys.argv[1])
            store = json.loads(archive.read('DocumentMetadata.json'))['store']
            digest = hashlib.sha256()
            with archive.open('StoreContent/persistentStore') as data:  # version 2 records no whole-store SHA-256
                for chunk in iter(lambda: data.read(1 << 20), b''):
                    digest.update(chunk)
            print(store['size'], digest.hexdigest())
            """, [bundle]).split(separator: " ")
        return (Int64(line[0]) ?? -1, String(line[1].prefix(64)))
    }

    /// Runs the built binary under `/usr/bin/time`: its status, output and peak resident set size in bytes.
    private static func measured(_ arguments: [String], in directory: FilePath)
    throws -> (status: Int32, stdout: String, stderr: String, peak: Int) {
        let report = directory.appending("time-\(UUID().uuidString).txt").string
        let result = try execute("/usr/bin/time", ["-f", "%M", "-o", report, Docconvert.binary] + arguments)
        // > GNU time writes "Command exited with non-zero status N" before the figure when the command fails.
        let text = try String(contentsOfFile: report, encoding: .utf8)
        let kibibytes = text.split(separator: "\n").last.flatMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        return (result.status, result.stdout, result.stderr, kibibytes.map { $0 << 10 } ?? .max)
    }

    static let int64Max = "9223372036854775807"

    /// 256 MiB, the most any command may hold on any bundle; not checked under a sanitizer (scripts/sanitize.sh),
    /// whose shadow memory and quarantine are not the program's.
    static let memoryBound = ProcessInfo.processInfo.environment["MANAGED_DOCUMENT_SANITIZER"] == nil ? 256 << 20 : Int.max

    @Test("inspect, verify, extract and query exit 65 on absurd numbers, naming the metadata",
          arguments: [
            [("store.segments.interval", int64Max)],
            [("store.segments.interval", "-65536")],
            [("store.segments.interval", "0")],
            [("store.segments.interval", "65537")],
            [("store.size", int64Max)],
            [("store.size", "-1")],
            [("store.deflateRestarts.interval", int64Max)],
            [("store.deflateRestarts.offsets", "[0, \(int64Max)]")],
            [("provenance", #"{"kind": "sqlite", "fileName": "x.sqlite", "size": -1, "files": [], "convertedAt": "2026-01-01T00:00:00Z"}"#)],
          ])
    func refused(_ edits: [(String, String)]) throws {
        let directory = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory.string) }  // Squash cleanup error.
        let good = try Self.makeBundle(in: directory)
        let bundle = directory.appending("Absurd.mdz").string
        try Python.rewritingMetadata(of: good, to: bundle, edits)
        let commands: [[String]] = [
            ["inspect", bundle], ["inspect", "--json", bundle], ["verify", bundle],
            ["extract", bundle, "--directory", directory.appending("out").string],
            ["extract", bundle, "--output", directory.appending("out.sqlite").string],
            ["query", bundle, "SELECT count(*) FROM note"],
        ]
        for command in commands {
            let result = try Docconvert.run(command)
            #expect(result.status == 65, "\(command): \(result.status) \(result.stderr.prefix(400))")
            #expect(result.stderr.hasPrefix("error: \(bundle): DocumentMetadata.json: ")
                        || result.stderr.hasPrefix("error: \(bundle): StoreContent/persistentStore: "),
                    "\(command): \(result.stderr.prefix(400))")
            #expect(!result.stderr.contains("Backtrac") && !result.stderr.contains("Fatal error"),
                    "\(command): \(result.stderr.prefix(400))")
        }
    }

    @Test("a 300 MiB store declared as one restart segment and one digest segment: query stays under 256 MiB",
          .timeLimit(.minutes(5)))
    func oneSegmentStore() throws {
        let directory = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory.string) }  // Squash cleanup error.
        let good = try Self.makeBundle(in: directory, megabytes: 300)
        let (size, sha256) = try Self.storeFacts(good)
        #expect(size > 300 << 20)
        let bundle = directory.appending("OneSegment.mdz").string
        try Python.rewritingMetadata(of: good, to: bundle, [
            ("store.segments.interval", "\(size)"), ("store.segments.sha256", "\"\(sha256)\""),
            ("store.deflateRestarts.interval", "\(size)"), ("store.deflateRestarts.offsets", "[0]"),
        ])
        let sql = "SELECT count(*), sum(length(body)) FROM note"
        let expected = try Docconvert.run(["query", good, sql])
        #expect(expected.status == 0, "\(expected.stderr)")

        let result = try Self.measured(["query", bundle, sql], in: directory)
        #expect(result.status == 0, "\(result.stderr.prefix(400))")
        #expect(result.stdout == expected.stdout)
        #expect(result.stderr.contains("ReadingLimits.maxDigestSegmentSize"), "\(result.stderr.prefix(400))")
        #expect(result.peak < Self.memoryBound, "docconvert query peaked at \(result.peak >> 20) MiB")

        // > Segments of 16 MiB (the most the defaults admit; a 64 GiB store's), read in place: bounded too.
        let digests = try Python.run("""
            import hashlib, sys, zipfile
            store = zipfile.ZipFile(sys.argv[1]).open('StoreContent/persistentStore')
            digests = []
            while True:
                chunk = store.read(16 << 20)
                if not chunk:
                    break
                digests.append(hashlib.sha256(chunk).hexdigest())
            print(''.join(digests), end='')
            """, [good])
        let coarse = directory.appending("Coarse.mdz").string
        try Python.rewritingMetadata(of: good, to: coarse, [
            ("store.segments.interval", "\(16 << 20)"), ("store.segments.sha256", "\"\(digests)\""),
        ])
        let inPlace = try Self.measured(["query", "--json", coarse, sql], in: directory)
        #expect(inPlace.status == 0, "\(inPlace.stderr.prefix(400))")
        #expect(inPlace.stdout.hasPrefix("{\"access\":\"segments\""), "\(inPlace.stdout.prefix(200))")
        #expect(inPlace.stderr.isEmpty, "\(inPlace.stderr.prefix(400))")
        #expect(inPlace.peak < Self.memoryBound, "docconvert query peaked at \(inPlace.peak >> 20) MiB in place")
    }

    @Test("metadata of millions of tiny values (15 MiB of [1,1,…]) is refused before it is parsed, under 256 MiB")
    func millionsOfValues() throws {
        let directory = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory.string) }  // Squash cleanup error.
        let good = try Self.makeBundle(in: directory)
        let bundle = directory.appending("Values.mdz").string
        try Python.rewritingMetadata(of: good, to: bundle, [], then: "metadata['padding'] = [1] * 7_500_000")
        for command in [["inspect", bundle], ["verify", bundle], ["query", bundle, "SELECT 1"]] {
            let result = try Self.measured(command, in: directory)
            #expect(result.status == 65, "\(command): \(result.stderr.prefix(400))")
            #expect(result.stderr.contains("JSON values"), "\(command): \(result.stderr.prefix(400))")
            #expect(result.peak < Self.memoryBound, "\(command) peaked at \(result.peak >> 20) MiB")
        }
    }
}
