import Foundation
import SystemPackage
import TestSupport
import Testing

/// Real legacy files for the tests of what happens outside the bundle: stores made by python's sqlite3, their bundles
/// read back by python's zipfile and sqlite3 or by the built binary, folders listed with every file's bytes.
enum LegacyFiles {
    /// A fresh folder, removed afterwards.
    static func withDirectory(_ body: (FilePath) throws -> Void) throws {
        let directory = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory.string) }  // Squash cleanup error.
        try body(directory)
    }

    static func bytes(_ path: FilePath) throws -> Data {
        try Data(contentsOf: URL(fileURLWithPath: path.string))
    }

    /// Every regular file under `folder`, relative to it, with its bytes.
    static func files(under folder: FilePath) throws -> [String: Data] {
        var found: [String: Data] = [:]
        let enumerator = FileManager.default.enumerator(atPath: folder.string)
        while let relative = enumerator?.nextObject() as? String {
            let path = folder.appending(relative)
            var isFolder: ObjCBool = false
            if FileManager.default.fileExists(atPath: path.string, isDirectory: &isFolder), !isFolder.boolValue {
                found[relative] = try bytes(path)
            }
        }
        return found
    }

    /// `Notes.sqlite` in each of `folders`: one main file, byte for byte the same in every folder (the schema only,
    /// in WAL mode), and a `-wal` of its own holding that folder's rows (`"<folder name> <n>"`). Returns the rows.
    static func makeTwinWALStores(in folders: [FilePath], rows: Int = 3) throws -> [FilePath: [String]] {
        var made: [FilePath: [String]] = [:]
        for folder in folders {
            try FileManager.default.createDirectory(atPath: folder.string, withIntermediateDirectories: true)
            let label = folder.lastComponent?.string ?? "x"
            made[folder] = (1...rows).map { "\(label) \($0)" }
        }
        try Python.run("""
            import os, shutil, sqlite3, sys, tempfile
            scratch = tempfile.mkdtemp()
            template = os.path.join(scratch, 'template.sqlite')
            db = sqlite3.connect(template)
            db.execute('PRAGMA journal_mode=WAL')
            db.execute('CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)')
            db.commit()
            db.close()
            rows = int(sys.argv[1])
            for folder in sys.argv[2:]:
                store = os.path.join(folder, 'Notes.sqlite')
                shutil.copyfile(template, store)
                db = sqlite3.connect(store)
                db.execute('PRAGMA wal_autocheckpoint=0')
                label = os.path.basename(folder)
                db.executemany('INSERT INTO notes(body) VALUES (?)', [('%s %d' % (label, n),) for n in range(1, rows + 1)])
                db.commit()
                shutil.copyfile(store + '-wal', store + '-wal.keep')
                db.close()  # checkpoints and removes the -wal: the main file goes back, the -wal is put back
                shutil.copyfile(template, store)
                os.replace(store + '-wal.keep', store + '-wal')
                for leftover in ('-shm',):
                    if os.path.exists(store + leftover): os.remove(store + leftover)
            shutil.rmtree(scratch)
            """, [String(rows)] + folders.map(\.string))
        return made
    }

    /// The `body` column of `notes` in `bundle`'s store, extracted by the binary and read by python's sqlite3.
    static func rows(in bundle: FilePath, scratch: FilePath) throws -> [String] {
        let store = scratch.appending("extracted-\(UUID().uuidString).sqlite")
        let extracted = try Docconvert.run(["extract", bundle.string, "--output", store.string])
        #expect(extracted.status == 0, "\(extracted.stderr)")
        defer { try? FileManager.default.removeItem(atPath: store.string) }  // Squash cleanup error.
        let output = try Python.run("""
            import sqlite3, sys
            for (body,) in sqlite3.connect(sys.argv[1]).execute('SELECT body FROM notes ORDER BY id'): print(body)
            """, [store.string])
        return output.split(separator: "\n").map(String.init)
    }

    /// The backed-up stores under `backup`: for each folder holding a `Notes.sqlite`, its main file and `-wal`.
    static func backedUpStores(under backup: FilePath) throws -> [(main: Data, wal: Data?)] {
        let files = try files(under: backup)
        return files.keys.filter { $0.hasSuffix("/Notes.sqlite") }.sorted().map { main in
            (files[main]!, files[main + "-wal"])
        }
    }

    /// `count` rollback-journal stores `sNN.sqlite` in `folder`, each with a table `t` of rows `"sNN k"`.
    static func makeStores(_ count: Int, in folder: FilePath, rows: Int = 20) throws {
        for number in 0..<count {
            let name = "s" + (number < 10 ? "0" : "") + "\(number)"
            try Fixtures.makeListStore(at: folder.appending(name + ".sqlite"), table: "t", column: "x",
                                       values: (0..<rows).map { "\(name) \($0)" })
        }
    }

    /// For every bundle in `folder`: its name and the `x` column of `t` in its store, read by python's zipfile and
    /// sqlite3 (one line each: `NAME.mdz: row,row,...`).
    static func bundleRows(in folder: FilePath) throws -> [String: String] {
        let output = try Python.run("""
            import os, sqlite3, sys, tempfile, zipfile
            folder = sys.argv[1]
            scratch = tempfile.mkdtemp()
            for name in sorted(os.listdir(folder)):
                if not name.endswith('.mdz'): continue
                copy = os.path.join(scratch, name + '.sqlite')
                with open(copy, 'wb') as out:
                    out.write(zipfile.ZipFile(os.path.join(folder, name)).read('StoreContent/persistentStore'))
                values = [x for (x,) in sqlite3.connect(copy).execute('SELECT x FROM t ORDER BY rowid')]
                print('%s: %s' % (name, ','.join(values)))
            """, [folder.string])
        var rows: [String: String] = [:]
        for line in output.split(separator: "\n") {
            guard let colon = line.firstIndex(of: ":") else { continue }
            rows[String(line[..<colon])] = String(line[line.index(colon, offsetBy: 2)...])
        }
        return rows
    }

    /// Lock files (`.NAME.mdz.lock`) in `folder` whose bundle is there and whose store is gone: items done.
    static func lockFilesOfDoneItems(in folder: FilePath) -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder.string)) ?? []
        let present = Set(names)
        return names.filter { name in
            guard name.hasPrefix("."), name.hasSuffix(".mdz.lock") else { return false }
            let bundle = String(name.dropFirst().dropLast(".lock".count))
            let store = String(bundle.dropLast(".mdz".count)) + ".sqlite"
            return present.contains(bundle) && !present.contains(store)
        }
    }

    /// A python3 process holding `store` open through `sqlite3.connect` (a rollback journal): it commits a table
    /// with one row (`kept`), says `ready` and waits, idle, holding no lock. Told to go on (``finish()``), it commits
    /// a second row (`later`) and exits.
    final class IdleConnection {
        private let python: PythonProcess

        init(store: FilePath) throws {
            python = try PythonProcess("""
                import sqlite3, sys
                db = sqlite3.connect(sys.argv[1])
                db.execute('CREATE TABLE IF NOT EXISTS t(x TEXT)')
                db.execute("INSERT INTO t VALUES ('kept')")
                db.commit()
                print('ready')
                sys.stdin.readline()
                db.execute("INSERT INTO t VALUES ('later')")
                db.commit()
                db.close()
                print('committed')
                """, [store.string])
            let line = python.readLine()
            try #require(line == "ready", "python3 said \(line ?? "nothing") instead of ready")
        }

        /// Lets it commit its second row and exit; what it printed then.
        func finish() -> (status: Int32, output: String) {
            python.send("go")
            return python.finish()
        }
    }

    /// The `x` column of `t` in `bundle`'s store.
    static func values(in bundle: FilePath, scratch: FilePath) throws -> [String] {
        let store = scratch.appending("extracted-\(UUID().uuidString).sqlite")
        let extracted = try Docconvert.run(["extract", bundle.string, "--output", store.string])
        #expect(extracted.status == 0, "\(extracted.stderr)")
        defer { try? FileManager.default.removeItem(atPath: store.string) }  // Squash cleanup error.
        let output = try Python.run("""
            import sqlite3, sys
            for (x,) in sqlite3.connect(sys.argv[1]).execute('SELECT x FROM t ORDER BY rowid'): print(x)
            """, [store.string])
        return output.split(separator: "\n").map(String.init)
    }
}
