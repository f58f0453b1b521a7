import Foundation
import ManagedDocument
import SystemPackage
import TestSupport
import Testing

/// What an app's conversion does with the legacy files, through the public API: backups that never replace one
/// another, and a store another process has open left where it is.
@Suite("Legacy disposal, as an app converts")
struct LegacyDisposalTests {
    private static func bytes(_ path: FilePath) throws -> Data { try Data(contentsOf: URL(fileURLWithPath: path.string)) }

    @Test("two stores named alike with equal main files and different -wal files: two backup folders, both whole")
    func backupsNeverReplace() async throws {
        try await withTemporaryDirectory { directory in
            let folders = [directory.appending("a"), directory.appending("b")]
            for folder in folders { try FileManager.default.createDirectory(atPath: folder.string, withIntermediateDirectories: true) }
            // > One main file (the schema, in WAL mode) copied to both, then each gets a -wal of its own with its rows.
            try Python.run("""
                import os, shutil, sqlite3, sys
                template = os.path.join(sys.argv[1], 'template.sqlite')
                db = sqlite3.connect(template); db.execute('PRAGMA journal_mode=WAL')
                db.execute('CREATE TABLE t(x TEXT)'); db.commit(); db.close()
                for folder in sys.argv[2:]:
                    store = os.path.join(folder, 'Notes.sqlite')
                    shutil.copyfile(template, store)
                    db = sqlite3.connect(store); db.execute('PRAGMA wal_autocheckpoint=0')
                    db.execute('INSERT INTO t VALUES (?)', (os.path.basename(folder),)); db.commit()
                    shutil.copyfile(store + '-wal', store + '-wal.keep'); db.close()
                    shutil.copyfile(template, store); os.replace(store + '-wal.keep', store + '-wal')
                    if os.path.exists(store + '-shm'): os.remove(store + '-shm')
                """, [directory.string] + folders.map(\.string))
            var options = ConversionOptions()
            options.backupDirectory = directory.appending("bk")
            var locations: [String] = []
            for folder in folders {
                let store = folder.appending("Notes.sqlite"), wal = FilePath(store.string + "-wal")
                let original = (try Self.bytes(store), try Self.bytes(wal))
                let report = try LegacyConverter(options: options).convert(storeAt: store)
                let location = FilePath(try #require(report.backupLocation))
                #expect(try Self.bytes(location.appending("Notes.sqlite")) == original.0)
                #expect(try Self.bytes(location.appending("Notes.sqlite-wal")) == original.1)
                #expect(report.rowCounts["t"] == 1)
                locations.append(location.string)
            }
            #expect(Set(locations).count == 2, "\(locations)")
            #expect(try Self.bytes(FilePath(locations[0]).appending("Notes.sqlite"))
                    == (try Self.bytes(FilePath(locations[1]).appending("Notes.sqlite"))))
        }
    }

    @Test("a store a python process has open, idle with a rollback journal, is busy: nothing moved, no bundle left")
    func storeOpenElsewhere() async throws {
        try await withTemporaryDirectory { directory in
            let store = directory.appending("r.sqlite"), bundle = directory.appending("r.mdz")
            let app = try PythonProcess("""
                import sqlite3, sys
                db = sqlite3.connect(sys.argv[1])
                db.execute('CREATE TABLE t(x TEXT)'); db.execute("INSERT INTO t VALUES ('kept')"); db.commit()
                print('ready'); sys.stdin.readline()
                db.execute("INSERT INTO t VALUES ('later')"); db.commit(); db.close()
                """, [store.string])
            #expect(app.readLine() == "ready")
            let before = try Self.bytes(store)

            var options = ConversionOptions()
            options.busyTimeout = 0.5
            let error = #expect(throws: DocumentError.self) { try LegacyConverter(options: options).convert(storeAt: store) }
            #expect(error?.code == .storeBusy)
            #expect(error?.path == store, "\(String(describing: error))")
            #expect(try Self.bytes(store) == before)
            #expect(!FileManager.default.fileExists(atPath: bundle.string))

            app.send("go")
            #expect(app.finish().status == 0)
            let report = try LegacyConverter(options: options).convert(storeAt: store)
            #expect(report.rowCounts["t"] == 2 && report.backupLocation != nil)
            #expect(!FileManager.default.fileExists(atPath: store.string))
        }
    }
}
