import Foundation
import SystemPackage
import TestSupport
import Testing

/// Backups keep every store's legacy files: a folder that exists is never renamed over.
@Suite("docconvert: backups never replace")
struct BackupCommandTests {
    @Test("two stores named alike, equal main files, different -wal files: both backed up whole, through convert and batch",
          arguments: ["convert", "batch"])
    func backupsNeverReplace(command: String) throws {
        try LegacyFiles.withDirectory { directory in
            let tree = directory.appending("tree")
            let folders = [tree.appending("a"), tree.appending("b")]
            let rows = try LegacyFiles.makeTwinWALStores(in: folders)
            var originals: [(main: Data, wal: Data?)] = []
            for folder in folders {
                let store = folder.appending("Notes.sqlite")
                originals.append((try LegacyFiles.bytes(store), try LegacyFiles.bytes(FilePath(store.string + "-wal"))))
            }
            #expect(originals[0].main == originals[1].main, "the fixture's main files should be equal")
            #expect(originals[0].wal != originals[1].wal, "the fixture's -wal files should differ")

            let backup = directory.appending("bk")
            if command == "convert" {
                for folder in folders {
                    let run = try Docconvert.run(["convert", folder.appending("Notes.sqlite").string,
                                                  "--legacy", "backup", "--backup-dir", backup.string])
                    #expect(run.status == 0, "\(run.stderr)")
                }
            } else {
                let run = try Docconvert.run(["batch", tree.string, "--backup-dir", backup.string, "--quiet"])
                #expect(run.status == 0, "\(run.stderr)")
            }

            let stored = try LegacyFiles.backedUpStores(under: backup)
            let listing = try LegacyFiles.files(under: backup).keys.sorted()
            #expect(stored.count == 2, "the backup folder holds \(listing)")
            for original in originals {
                #expect(stored.contains { $0.main == original.main && $0.wal == original.wal },
                        "a store's main file and -wal are not in the backup folder byte for byte")
            }
            for folder in folders {
                #expect(!FileManager.default.fileExists(atPath: folder.appending("Notes.sqlite").string))
                #expect(try LegacyFiles.rows(in: folder.appending("Notes.mdz"), scratch: directory) == rows[folder])
            }
        }
    }
}
