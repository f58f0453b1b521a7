import Foundation
import Glibc
import SystemPackage
import TestSupport
import Testing

/// Documents opened by their path, as any SQLite database is, through the extension's second entry point
/// (`sqlite3_mdzvfs_default_init`): python's sqlite3 module, the sqlite3 shell, and the tools people point at a file
/// (Datasette over HTTP, sqlite-utils, pandas), each row for row against the store `docconvert extract` writes out.
@Suite("SQLite tools open a document by its path", .serialized, .serialChain)
struct SQLiteToolsTests {
    private static var samples: FilePath {
        FilePath(URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Samples/stores").path)
    }

    /// Converts a sample (kept) into `folder` and extracts its store: the document and the extracted store.
    private func document(_ sample: String, in folder: FilePath, named name: String? = nil) throws
        -> (document: String, store: String) {
        let copy = folder.appending(sample)
        try FileManager.default.copyItem(atPath: Self.samples.appending(sample).string, toPath: copy.string)
        let document = folder.appending(name ?? (sample + ".mdz")).string
        let converted = try Docconvert.run(["convert", copy.string, "--output", document, "--legacy", "keep"])
        try #require(converted.status == 0, "\(converted.stderr)")
        let store = folder.appending(sample + ".extracted.sqlite").string
        let extracted = try Docconvert.run(["extract", document, "--output", store])
        try #require(extracted.status == 0, "\(extracted.stderr)")
        return (document, store)
    }

    /// Python: `digests(con)`, one digest per table over its rows in a canonical JSON form (blobs as Datasette writes
    /// them), sorted, so that tools that page in another order compare equal; `quote(path)`, a path as a `file:` URI.
    static let common = """
        import base64, hashlib, json, os, sqlite3, sys, urllib.parse
        def canonical(value):
            if isinstance(value, bytes):
                return {'$base64': True, 'encoded': base64.b64encode(value).decode()}
            return value
        def as_datasette(value):
            # > Datasette's JSON writes a blob that is valid UTF-8 as a string, any other as base64.
            if isinstance(value, bytes):
                try:
                    return value.decode('utf8')
                except UnicodeDecodeError:
                    return canonical(value)
            return value
        def digest(rows, form=canonical):
            lines = sorted(json.dumps([form(v) for v in row]) for row in rows)
            return [len(lines), hashlib.sha256('\\n'.join(lines).encode()).hexdigest()]
        def digests(con, form=canonical):
            names = [n for (n,) in con.execute("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")]
            return {n: digest(con.execute('SELECT * FROM "%s"' % n.replace('"', '""')), form) for n in names}
        def quote(path):
            return 'file:' + urllib.parse.quote(os.path.abspath(path))

        """

    @Test("python by path: documents served, plain files passed through (created, attached, VACUUM INTO, WAL), a shared memory database kept, a connection opened before the load adopted, a notice only on writes")
    func pythonByPath() throws {
        try #require(SQLiteHosts.unavailable == nil, "\(SQLiteHosts.unavailable ?? "")")
        let folder = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: folder.string) }  // Squash cleanup error.
        let (document, store) = try self.document("TasteB.sqlite", in: folder, named: "Taste # 100% done.mdz")
        let script = Self.common + Self.byPathScript
        var environment = ProcessInfo.processInfo.environment
        environment["MDZVFS_LOG"] = "stderr"
        let result = try SQLiteHosts.runPython(script, [document, store, folder.string], environment: environment)
        try #require(result.status == 0, "\(result.stderr)")
        let out = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        let extracted = try #require(out["extracted"] as? [String: Any])
        #expect(extracted.count == 5, "\(extracted)")
        for key in ["adopted", "byPath", "readOnly", "named", "copy"] {
            #expect(NSDictionary(dictionary: out[key] as? [String: Any] ?? [:]).isEqual(to: extracted), "\(key): \(out[key] ?? "none")")
        }
        #expect(out["shared"] as? Int == 1, "the shared memory database made before the load was lost")
        #expect((out["plain"] as? [[Int]]) == [[2]])
        #expect((out["missingNamed"] as? String) == "unable to open database file")
        #expect((out["refused"] as? [String]) == Array(repeating: "attempt to write a readonly database", count: 3),
                "\(out["refused"] ?? "")")
        for name in ["attached.db", "copy.sqlite", "attached-named.db", "copy-named.sqlite", "plain.db", "created.db"] {
            #expect(FileManager.default.fileExists(atPath: folder.appending(name).string), "\(name) was not created")
        }
        #expect(!FileManager.default.fileExists(atPath: folder.appending("missing.mdz").string))
        #expect((out["damaged"] as? [String]) == ["error", "error"], "\(out["damaged"] ?? "")")
        // > The notice says how to edit a document only when something writes: three times, all after "writing".
        let notice = "served read-only by the mdz VFS"
        let parts = result.stderr.components(separatedBy: "writing\n")
        #expect(parts.count == 2 && !parts[0].contains(notice), "\(result.stderr)")
        #expect(parts.last?.components(separatedBy: notice).count == 4, "\(result.stderr)")
        #expect(!result.stderr.contains("mdz: ") || result.stderr.contains("missing.mdz"), "\(result.stderr)")
    }

    /// Python by path with the default entry point: a shared memory database and a connection made before the load,
    /// the document by path, read-only and named, the plain files that pass through, damaged documents, and writes.
    static let byPathScript = """
        library, document, store, folder = sys.argv[1:5]
        os.chdir(folder)
        out = {}
        # > A shared-cache memory database made before the load, as Datasette's internal one.
        early = sqlite3.connect('file:internal?mode=memory&cache=shared', uri=True)
        early.execute('CREATE TABLE databases(x)'); early.commit()
        # > A connection to the document made before the load (the shell, sqlite-utils): loaded twice.
        adopted = sqlite3.connect(document)
        adopted.enable_load_extension(True)
        for _ in range(2):
            adopted.execute("SELECT load_extension(?, 'sqlite3_mdzvfs_default_init')", (library,))
        print('loaded', file=sys.stderr, flush=True)
        out['adopted'] = digests(adopted)
        late = sqlite3.connect('file:internal?mode=memory&cache=shared', uri=True)
        out['shared'] = late.execute("SELECT count(*) FROM sqlite_schema WHERE name = 'databases'").fetchone()[0]
        out['byPath'] = digests(sqlite3.connect(document))
        out['readOnly'] = digests(sqlite3.connect(quote(document) + '?mode=ro', uri=True))
        out['named'] = digests(sqlite3.connect(quote(document) + '?vfs=mdz', uri=True))
        out['extracted'] = digests(sqlite3.connect(quote(store) + '?mode=ro', uri=True))
        print('read', file=sys.stderr, flush=True)
        # > Every other file passes to the default VFS, creation included.
        con = sqlite3.connect(document)
        con.execute("ATTACH 'attached.db' AS a"); con.execute('CREATE TABLE a.t(x)')
        con.execute('INSERT INTO a.t VALUES (1)'); con.commit()
        con.execute("VACUUM INTO 'copy.sqlite'")
        out['copy'] = digests(sqlite3.connect('copy.sqlite'))
        named = sqlite3.connect(quote(document) + '?vfs=mdz', uri=True)
        named.execute("ATTACH 'attached-named.db' AS a"); named.execute('CREATE TABLE a.t(x)'); named.commit()
        named.execute("VACUUM INTO 'copy-named.sqlite'")
        plain = sqlite3.connect('plain.db'); plain.execute('PRAGMA journal_mode = WAL')
        plain.execute('CREATE TABLE p(x)'); plain.execute('INSERT INTO p VALUES (2)'); plain.commit()
        out['plain'] = plain.execute('SELECT x FROM p').fetchall()
        sqlite3.connect('').execute('CREATE TABLE z(x)')
        try:
            sqlite3.connect('file:missing.mdz?vfs=mdz', uri=True).execute('SELECT 1 FROM sqlite_schema')
            out['missingNamed'] = 'opened'
        except sqlite3.OperationalError as error:
            out['missingNamed'] = str(error)
        sqlite3.connect('created.db').execute('CREATE TABLE n(x)')
        # > Damaged documents by path: cut short, and one byte of the store's entry changed. An error, never rows.
        data = open(document, 'rb').read()
        open('cut.mdz', 'wb').write(data[:len(data) // 2])
        at = data.index(b'StoreContent/persistentStore') + 40
        open('flipped.mdz', 'wb').write(data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:])
        out['damaged'] = []
        for name in ('cut.mdz', 'flipped.mdz'):
            try:
                rows = sqlite3.connect(name).execute('SELECT count(*) FROM ZDISH').fetchall()
                out['damaged'].append('rows: %r' % rows)
            except sqlite3.DatabaseError as error:
                out['damaged'].append('error')
        print('writing', file=sys.stderr, flush=True)
        out['refused'] = []
        for statement in ('DELETE FROM ZDISH', 'CREATE TABLE t(x)', 'PRAGMA user_version = 7'):
            try:
                con.execute(statement); con.commit(); out['refused'].append('written: ' + statement)
            except sqlite3.OperationalError as error:
                out['refused'].append(str(error))
        print(json.dumps(out))
        """

    @Test("the sqlite3 shell by path: -readonly and .load, or .load then .open --readonly: its dump equals the extracted store's")
    func shellByPath() throws {
        try #require(SQLiteHosts.unavailable == nil, "\(SQLiteHosts.unavailable ?? "")")
        let folder = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: folder.string) }  // Squash cleanup error.
        let (document, store) = try self.document("Diary.sqlite", in: folder)
        let load = ".load \(SQLiteHosts.library) sqlite3_mdzvfs_default_init"
        let expected = try execute("sqlite3", ["-readonly", store, ".dump"])
        try #require(expected.status == 0 && expected.stdout.contains("CREATE TABLE"))
        let byPath = try execute("sqlite3", ["-readonly", "-bail", "-cmd", load, document, ".dump"])
        #expect(byPath.status == 0 && byPath.stdout == expected.stdout, "\(byPath.stderr)")
        let opened = try execute("sqlite3", ["-bail", "-cmd", load, "-cmd", ".open --readonly '\(document)'", ":memory:",
                                             ".dump"])
        #expect(opened.status == 0 && opened.stdout == expected.stdout, "\(opened.stderr)")
        // > Still one way in: only the two entry points are exported, and no SQLite symbol is imported.
        let exported = try execute("nm", ["-D", "--defined-only", "--extern-only", SQLiteHosts.library])
        let functions = exported.stdout.split(separator: "\n").filter { $0.contains(" T ") }.map { $0.split(separator: " ").last ?? "" }
        #expect(functions.sorted() == ["sqlite3_mdzvfs_default_init", "sqlite3_mdzvfs_init"], "\(functions)")
    }

    @Test("Datasette serves a document by path over loopback: every table row for row, and SQL; sqlite-utils tables and rows; pandas read_sql",
          .enabled(if: SQLiteHosts.toolsPython != nil, Comment(rawValue: SQLiteHosts.toolsAbsent)))
    func datasetteSQLiteUtilsPandas() throws {
        try #require(SQLiteHosts.unavailable == nil, "\(SQLiteHosts.unavailable ?? "")")
        let python = try #require(SQLiteHosts.toolsPython)
        let folder = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: folder.string) }  // Squash cleanup error.
        let (document, store) = try self.document("TasteB.sqlite", in: folder, named: "taste.mdz")
        let script = Self.common + Self.toolsScript
        let result = try execute(python, ["-c", script, SQLiteHosts.library, document, store])
        try #require(result.status == 0, "\(result.stderr)")
        let out = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        let extracted = try #require(out["extracted"] as? [String: [Any]])
        #expect(extracted.count == 5 && extracted.values.allSatisfy { ($0.first as? Int ?? 0) > 0 }, "\(extracted)")
        // > Every table as Datasette's JSON writes the extracted store's rows (a blob that is valid UTF-8 as text), and
        // > the blobs' bytes through its SQL API.
        #expect(NSDictionary(dictionary: out["datasette"] as? [String: Any] ?? [:])
                    .isEqual(to: out["extractedAsDatasette"] as? [String: Any] ?? ["none": 0]),
                "datasette: \(out["datasette"] ?? "none")")
        let blobs = try #require(out["extractedBlobs"] as? [String])
        #expect(!blobs.isEmpty && out["datasetteBlobs"] as? [String] == blobs, "\(out["datasetteBlobs"] ?? "")")
        #expect(out["datasetteSQL"] as? Int == (extracted["ZDISH"]?.first as? Int), "\(out["datasetteSQL"] ?? "")")
        let counts = (out["sqliteUtilsCounts"] as? [String: Any] ?? [:]).mapValues { $0 as? Int ?? -1 }
        #expect(counts == extracted.mapValues { $0.first as? Int ?? -2 }, "\(counts)")
        #expect(NSArray(array: out["sqliteUtilsRows"] as? [Any] ?? []).isEqual(to: extracted["ZDISH"] ?? []),
                "sqlite-utils rows: \(out["sqliteUtilsRows"] ?? "")")
        #expect(NSArray(array: out["pandas"] as? [Any] ?? []).isEqual(to: extracted["ZDISH"] ?? []),
                "pandas: \(out["pandas"] ?? "")")
    }

    /// The tools, run as their users run them: `datasette serve PATH --load-extension LIB:ENTRY` on a free loopback
    /// port (every table paged through its JSON API, and one SQL query), `sqlite-utils tables --counts` and `rows`,
    /// `pandas.read_sql` on a connection opened by path.
    static let toolsScript = """
        import socket, subprocess, time, urllib.request
        library, document, store = sys.argv[1:4]
        entry = library + ':sqlite3_mdzvfs_default_init'
        bin = os.path.dirname(sys.executable)
        extracted = sqlite3.connect(quote(store) + '?mode=ro', uri=True)
        out = {'extracted': digests(extracted), 'extractedAsDatasette': digests(extracted, as_datasette),
               'extractedBlobs': [h for (h,) in extracted.execute('SELECT hex(Z_CONTENT) FROM Z_MODELCACHE')]}
        with socket.socket() as probe:
            probe.bind(('127.0.0.1', 0)); port = probe.getsockname()[1]
        log = open(document + '.datasette.log', 'w+')  # a pipe nobody reads would fill and stop the server
        server = subprocess.Popen([os.path.join(bin, 'datasette'), 'serve', document, '--load-extension', entry,
                                   '-h', '127.0.0.1', '-p', str(port)], stdout=log, stderr=subprocess.STDOUT)
        def get(path):
            with urllib.request.urlopen('http://127.0.0.1:%d%s' % (port, path), timeout=30) as response:
                return json.load(response)
        try:
            for _ in range(600):
                try:
                    get('/-/versions.json'); break
                except OSError:
                    if server.poll() is not None:
                        log.seek(0); raise SystemExit('datasette ended: ' + log.read())
                    time.sleep(0.1)
            name = os.path.splitext(os.path.basename(document))[0]
            served = {}
            for table in get('/%s.json' % name)['tables']:
                rows, path = [], '/%s/%s.json?_shape=arrays&_size=max' % (name, urllib.parse.quote(table['name']))
                # > Datasette shows a table without a primary key with its rowid first: not one of its columns.
                while path:
                    page = get(path)
                    extra = page['columns'][:1] == ['rowid'] and 'rowid' not in table['columns']
                    rows += [row[1:] if extra else row for row in page['rows']]
                    path = page['next_url'] and urllib.parse.urlsplit(page['next_url'])._replace(scheme='', netloc='').geturl()
                lines = sorted(json.dumps(row) for row in rows)
                served[table['name']] = [len(lines), hashlib.sha256('\\n'.join(lines).encode()).hexdigest()]
            out['datasette'] = served
            out['datasetteBlobs'] = [r['h'] for r in get('/%s.json?sql=%s&_shape=array' % (name, urllib.parse.quote(
                'SELECT hex(Z_CONTENT) AS h FROM Z_MODELCACHE')))]
            out['datasetteSQL'] = get('/%s.json?sql=%s&_shape=array' % (name, urllib.parse.quote('SELECT count(*) AS n FROM ZDISH')))[0]['n']
        finally:
            server.kill(); server.wait()
        utils = os.path.join(bin, 'sqlite-utils')
        tables = json.loads(subprocess.run([utils, 'tables', document, '--counts', '--load-extension', entry],
                                           check=True, capture_output=True).stdout)
        out['sqliteUtilsCounts'] = {t['table']: t['count'] for t in tables}
        rows = json.loads(subprocess.run([utils, 'rows', document, 'ZDISH', '--arrays', '--load-extension', entry],
                                         check=True, capture_output=True).stdout)
        out['sqliteUtilsRows'] = digest(rows)
        import pandas
        loader = sqlite3.connect(':memory:'); loader.enable_load_extension(True)
        loader.execute("SELECT load_extension(?, 'sqlite3_mdzvfs_default_init')", (library,))
        frame = pandas.read_sql('SELECT * FROM ZDISH', sqlite3.connect(document))
        out['pandas'] = digest([[None if pandas.isna(v) else (v.item() if hasattr(v, 'item') else v) for v in row]
                                for row in frame.itertuples(index=False)])
        print(json.dumps(out))
        """
}
