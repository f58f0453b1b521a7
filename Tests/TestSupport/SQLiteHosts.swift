import Foundation

/// The `mdzvfs` extension as the SQLite tools load it: the built `libmdzvfs.so`, Debian's `sqlite3` shell and Debian's
/// `/usr/bin/python3` (its `sqlite3` module enables extension loading; a python built without it is not a host).
public enum SQLiteHosts {
    /// The built extension (`swift build` makes it beside `docconvert`).
    public static var library: String { builtProduct("libmdzvfs.so") }

    /// The python whose `sqlite3` module loads extensions.
    public static let python = "/usr/bin/python3"

    /// Why the hosts cannot run here, or `nil` when they can: a failure, not a reason to skip (`swift test` builds the
    /// extension; `scripts/setup.sh` installs the shell and python).
    public static var unavailable: String? {
        if !FileManager.default.fileExists(atPath: library) { return "\(library) is not built (swift build builds it)" }
        if !FileManager.default.isExecutableFile(atPath: python) { return "\(python) is missing (apt-get install python3)" }
        if (try? execute("sqlite3", ["-version"]))?.status != 0 { return "the sqlite3 shell is missing (apt-get install sqlite3)" }
        return nil
    }

    /// The python of the SQLite tools' venv (`scripts/sqlite-tools.sh`: Datasette, sqlite-utils and pandas, pinned, over
    /// Debian's python), or `nil` when it is not installed.
    public static var toolsPython: String? {
        let venv = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent(".build-tools/venv")
        let python = venv.appendingPathComponent("bin/python").path
        let installed = FileManager.default.fileExists(atPath: venv.appendingPathComponent(".installed").path)
        return installed && FileManager.default.isExecutableFile(atPath: python) ? python : nil
    }

    /// Why the SQLite tools' tests cannot run here (printed by the test framework as the reason they skip).
    public static let toolsAbsent = "Datasette, sqlite-utils and pandas are not installed in .build-tools/venv "
        + "(scripts/setup.sh runs scripts/sqlite-tools.sh, which needs PyPI)"

    /// The `file:` URI of `path` through the extension's VFS (`?`, `#` and `%` escaped, as SQLite's URIs want).
    public static func uri(_ path: String, readOnly: Bool = false) -> String {
        var escaped = ""
        for character in path.unicodeScalars {
            switch character {
            case "%": escaped += "%25"
            case "?": escaped += "%3f"
            case "#": escaped += "%23"
            default: escaped.unicodeScalars.append(character)
            }
        }
        return "file:\(escaped)?vfs=mdz" + (readOnly ? "&mode=ro" : "")
    }

    /// Runs Debian's `sqlite3` shell on an in-memory database that loads the extension, opens `document` through it
    /// and runs `commands`; its exit status and output.
    public static func shell(_ document: String, _ commands: [String], readOnly: Bool = false,
                             environment: [String: String]? = nil)
        throws -> (status: Int32, stdout: String, stderr: String) {
        try execute("sqlite3", [":memory:", "-bail", "-cmd", ".log stderr", "-cmd", ".load \(library)",
                                "-cmd", ".open '\(uri(document, readOnly: readOnly))'"] + commands,
                    environment: environment)
    }

    /// Runs `script` with Debian's python; `sys.argv[1]` is the extension's path, the arguments follow.
    public static func runPython(_ script: String, _ arguments: [String], environment: [String: String]? = nil)
        throws -> (status: Int32, stdout: String, stderr: String) {
        try execute(python, ["-c", script, library] + arguments, environment: environment)
    }

    /// A python script printing, as one JSON object, a digest per table of every store it is given: `name:` (a
    /// loose store, read-only) or `mdz:` (a document through the extension). Per table the row count and a SHA-256
    /// over every row's values in the order SQLite returns them (the same bytes give the same order), the schema's
    /// digest under `"sqlite_schema"`, `PRAGMA user_version` under `"user_version"`.
    public static let tableDigests = """
        import hashlib, json, sqlite3, sys
        loader = sqlite3.connect(':memory:')
        loader.enable_load_extension(True)
        loader.load_extension(sys.argv[1])

        def uri(path):
            return path.replace('%', '%25').replace('?', '%3f').replace('#', '%23')

        def digests(con):
            out = {'sqlite_schema': hashlib.sha256(repr(con.execute(
                'SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY name').fetchall()).encode()).hexdigest(),
                'user_version': con.execute('PRAGMA user_version').fetchone()[0]}
            for (name,) in con.execute("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name").fetchall():
                digest, count = hashlib.sha256(), 0
                for row in con.execute('SELECT * FROM "%s"' % name.replace('"', '""')):
                    digest.update(repr(row).encode())
                    count += 1
                out[name] = [count, digest.hexdigest()]
            return out

        result = []
        for argument in sys.argv[2:]:
            if argument.startswith('mdz:'):
                con = sqlite3.connect('file:' + uri(argument[4:]) + '?vfs=mdz&mode=ro', uri=True)
            else:
                con = sqlite3.connect('file:' + uri(argument) + '?mode=ro', uri=True)
            result.append(digests(con))
            con.close()
        print(json.dumps(result))
        """
}
