import Foundation
import SystemPackage
import Testing
import TestSupport

@Suite("A bundle the user may not write")
struct ReadOnlyBundleCommandTests {
    @Test("migrate leaves a bundle of mode 0444 as it is and says why, as a user who may write its folder")
    func migrateReadOnlyBundle() throws {
        let directory = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory.string) }  // Squash cleanup error.
        let bundle = directory.appending("docs").appending("Notes.mdz")
        try FileManager.default.createDirectory(atPath: bundle.removingLastComponent().string, withIntermediateDirectories: true)
        let created = try Docconvert.run(["create", bundle.string])
        #expect(created.status == 0, "\(created.stderr)")
        let migrations = directory.appending("migrations")
        try FileManager.default.createDirectory(atPath: migrations.string, withIntermediateDirectories: true)
        try "CREATE TABLE tag(name TEXT);\n".write(toFile: migrations.appending("V1__tags.sql").string, atomically: true, encoding: .utf8)
        #expect(chmod(directory.string, 0o755) == 0)
        #expect(chmod(bundle.removingLastComponent().string, 0o777) == 0)
        #expect(chmod(bundle.string, 0o444) == 0)
        let before = try Data(contentsOf: URL(fileURLWithPath: bundle.string))
        let result = try Docconvert.run(["migrate", bundle.removingLastComponent().string, "--migrations", migrations.string],
                                        unprivileged: true)
        #expect(result.status == 65, "\(result.stdout)\(result.stderr)")
        let said = result.stdout + result.stderr
        #expect(said.contains("Notes.mdz") && said.contains("0444") && said.contains("unchanged"), "\(said)")
        #expect(!said.contains("OpenOptions"), "a tool's message, not an app's: \(said)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: bundle.string)) == before)
    }
}
