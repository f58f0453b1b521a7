import Foundation
import SystemPackage
import TestSupport
import Testing

/// A store another process has open, even idle without a lock, is busy: its files are not moved.
@Suite("docconvert: a store in use stays")
struct StoreInUseCommandTests {
    @Test("a store another process has open (idle, rollback journal) is busy: nothing moved; once closed, a rerun converts it",
          arguments: ["convert", "batch"])
    func storeOpenElsewhereIsBusy(command: String) throws {
        try LegacyFiles.withDirectory { directory in
            let folder = directory.appending("docs")
            try FileManager.default.createDirectory(atPath: folder.string, withIntermediateDirectories: true)
            let store = folder.appending("r.sqlite"), bundle = folder.appending("r.mdz")
            let app = try LegacyFiles.IdleConnection(store: store)
            let before = try LegacyFiles.bytes(store)
            let arguments = command == "convert"
                ? ["convert", store.string, "--busy-timeout", "1"]
                : ["batch", folder.string, "--busy-timeout", "1", "--json"]
            let refused = try Docconvert.run(arguments)
            #expect(refused.status == 75, "\(refused.stdout) \(refused.stderr)")
            if command == "convert" {
                #expect(refused.stderr.contains("r.sqlite") && refused.stderr.contains("python"), "\(refused.stderr)")
            } else {
                let report = try JSONSerialization.jsonObject(with: Data(refused.stdout.utf8)) as? [String: Any]
                let items = report?["items"] as? [[String: Any]] ?? []
                #expect(items.count == 1 && items.first?["outcome"] as? String == "busy", "\(refused.stdout)")
            }
            #expect(try LegacyFiles.bytes(store) == before, "the store changed or moved")
            #expect(!FileManager.default.fileExists(atPath: bundle.string), "the bundle of a store in use was kept")
            #expect(!FileManager.default.fileExists(atPath: folder.appending("docconvert-backup").string))

            let app2 = app.finish()
            #expect(app2.status == 0 && app2.output.contains("committed"), "the app's commit failed: \(app2.output)")
            let converted = try Docconvert.run(Array(arguments.dropLast(command == "convert" ? 0 : 1)))
            #expect(converted.status == 0, "\(converted.stderr)")
            #expect(!FileManager.default.fileExists(atPath: store.string))
            let backups = try LegacyFiles.files(under: folder.appending("docconvert-backup"))
            #expect(backups.count == 1 && backups.first?.key.hasSuffix("/r.sqlite") == true, "\(backups.keys.sorted())")
            #expect(try LegacyFiles.values(in: bundle, scratch: directory) == ["kept", "later"])
        }
    }
}
