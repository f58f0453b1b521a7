import Foundation
import SystemPackage
import TestSupport
import Testing

/// What `inspect`, `verify` and `extract` say of each format version (FORMAT.md 13.1, 13.2), run as the built binary
/// on a version 1 bundle an earlier release wrote (`Tests/Fixtures/format-1`), and the version 2 (asked for) and
/// version 3 (the default) bundles this one writes.
@Suite("docconvert and format versions 1, 2 and 3")
struct FormatVersionCommandTests {
    static let version1 = FilePath(#filePath).removingLastComponent().removingLastComponent()
        .appending("Fixtures").appending("format-1").appending("large.mdz")

    /// The `store` object of `inspect --json`'s metadata.
    private static func storeMetadata(_ bundle: String) throws -> [String: Any] {
        let inspected = try Docconvert.run(["inspect", bundle, "--json"])
        #expect(inspected.status == 0, "\(inspected.stderr)")
        let json = try JSONSerialization.jsonObject(with: Data(inspected.stdout.utf8)) as? [String: Any]
        let metadata = json?["metadata"] as? [String: Any]
        return (metadata?["store"] as? [String: Any]) ?? [:]
    }

    @Test("inspect and verify name each version's digest; extract gives back the same store from both")
    func bothVersions() throws {
        let directory = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory.string) }  // Squash cleanup error.
        let old = Self.version1.string
        let extracted = directory.appending("old.sqlite").string
        #expect(try Docconvert.run(["extract", old, "--output", extracted]).status == 0)
        let new = directory.appending("New.mdz").string
        let created = try Docconvert.run(["create", new, "--from", extracted])
        #expect(created.status == 0, "\(created.stderr)")
        let second = directory.appending("Second.mdz").string
        let asked = try Docconvert.run(["create", second, "--from", extracted, "--format-version", "2"])
        #expect(asked.status == 0, "\(asked.stderr)")
        let refused = try Docconvert.run(["create", directory.appending("Fourth.mdz").string, "--from", extracted,
                                          "--format-version", "4"])
        #expect(refused.status == 64 && refused.stderr.contains("--format-version must be 2 or 3"), "\(refused.stderr)")

        for (bundle, version, key) in [(old, 1, "sha256"), (second, 2, "digest"), (new, 3, "digest")] {
            let store = try Self.storeMetadata(bundle)
            let digest = try #require(store[key] as? String, "\(bundle): \(store.keys.sorted())")
            #expect(store[key == "sha256" ? "digest" : "sha256"] == nil, "\(bundle) has only its version's digest")
            let text = try Docconvert.run(["inspect", bundle])
            #expect(text.stdout.contains("format version \(version)"), "\(text.stdout)")
            #expect(text.stdout.contains(version == 1 ? "store SHA-256:  \(digest)" : "store digest:   \(digest)"),
                    "\(text.stdout)")
            // > Version 3 keeps the segment records in the store index (FORMAT.md 13.2), and says so.
            #expect(text.stdout.contains(version == 3 ? "store index:    StoreContent/persistentStore.index"
                                                      : "store index:    none"), "\(text.stdout)")
            #expect((store["index"] != nil) == (version == 3), "\(store.keys.sorted())")
            let verified = try Docconvert.run(["verify", bundle, "--json"])
            #expect(verified.status == 0, "\(verified.stderr)")
            let report = try JSONSerialization.jsonObject(with: Data(verified.stdout.utf8)) as? [String: Any]
            let item = (report?["bundles"] as? [[String: Any]])?.first
            #expect(item?["formatVersion"] as? Int == version && item?["storeDigest"] as? String == digest)
            let line = try Docconvert.run(["verify", bundle])
            #expect(line.stdout.hasPrefix("ok: \(bundle): format version \(version), "), "\(line.stdout)")
        }
        for bundle in [new, second] {
            let again = directory.appending("again-\(UUID().uuidString).sqlite").string
            #expect(try Docconvert.run(["extract", bundle, "--output", again]).status == 0)
            #expect(FileManager.default.contentsEqual(atPath: extracted, andPath: again))
        }
    }
}
