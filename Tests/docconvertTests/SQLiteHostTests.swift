import Foundation
import Glibc
import SystemPackage
import TestSupport
import Testing

/// The `mdzvfs` extension in the SQLite tools people use: Debian's `sqlite3` shell and python's `sqlite3` module load
/// the built `libmdzvfs.so` and read documents in place, row for row what `docconvert extract` writes out.
@Suite("SQLite hosts read documents through the mdzvfs extension", .serialized, .serialChain)
struct SQLiteHostTests {
    /// The corpus (`../shared/corpus`), or `nil` with the reason printed.
    private static var corpus: FilePath? {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("shared/corpus")
        guard FileManager.default.fileExists(atPath: root.path) else {
            print("skipping the corpus stores: \(root.path) is absent")
            return nil
        }
        return FilePath(root.path)
    }

    private static var samples: FilePath {
        FilePath(URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Samples/stores").path)
    }

    /// Copies a legacy store (with its sidecars) or package into `folder`, converts it keeping the copy, and extracts
    /// the bundle's store: the document and its extracted store.
    private func convert(_ source: FilePath, into folder: FilePath) throws -> (document: String, store: String) {
        let name = source.lastComponent!.string
        let copy = folder.appending(name)
        for suffix in ["", "-wal", "-shm", "-journal"] where FileManager.default.fileExists(atPath: source.string + suffix) {
            try FileManager.default.copyItem(atPath: source.string + suffix, toPath: copy.string + suffix)
        }
        let document = folder.appending(name + ".mdz").string
        let converted = try Docconvert.run(["convert", copy.string, "--output", document, "--legacy", "keep"])
        #expect(converted.status == 0, "\(name): \(converted.stderr)")
        let store = folder.appending(name + ".extracted.sqlite").string
        let extracted = try Docconvert.run(["extract", document, "--output", store])
        #expect(extracted.status == 0, "\(name): \(extracted.stderr)")
        return (document, store)
    }

    /// Every table of each document read by python through the extension, against its extracted store; the sqlite3
    /// shell's `.dump` of both. Returns the rows read.
    @discardableResult
    private func compare(_ pairs: [(document: String, store: String)]) throws -> Int {
        let arguments = pairs.flatMap { ["mdz:" + $0.document, $0.store] }
        let result = try SQLiteHosts.runPython(SQLiteHosts.tableDigests, arguments)
        try #require(result.status == 0, "python: \(result.stderr)")
        let digests = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [[String: Any]])
        var rows = 0
        for (index, pair) in pairs.enumerated() {
            let served = digests[2 * index], extracted = digests[2 * index + 1]
            #expect(NSDictionary(dictionary: served).isEqual(to: extracted), "\(pair.document): \(served) != \(extracted)")
            rows += served.values.compactMap { ($0 as? [Any])?.first as? Int }.reduce(0, +)
            let dump = try SQLiteHosts.shell(pair.document, [".dump"])
            let expected = try execute("sqlite3", ["-readonly", pair.store, ".dump"])
            #expect(dump.status == 0, "\(pair.document): \(dump.stderr)")
            #expect(dump.stdout == expected.stdout && dump.stdout.contains("CREATE TABLE"),
                    "\(pair.document): the shell's dump differs from the extracted store's")
        }
        return rows
    }

    @Test("the samples and every corpus store and package, converted: every table row for row in python and the shell")
    func samplesAndCorpus() throws {
        try #require(SQLiteHosts.unavailable == nil, "\(SQLiteHosts.unavailable ?? "")")
        let folder = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: folder.string) }  // Squash cleanup error.
        var sources = ["Diary.sqlite", "Ledger.sqlite", "TasteB.sqlite", "minimalTime.sqlite", "Recipes.recipedoc"]
            .map { Self.samples.appending($0) }
        if let corpus = Self.corpus {
            let stores = FileManager.default.enumerator(atPath: corpus.appending("coredata").string)?.allObjects
                as? [String] ?? []
            sources += stores.filter { $0.hasSuffix(".sqlite") }.sorted().map { corpus.appending("coredata").appending($0) }
            // > A package is the folder holding StoreContent/persistentStore.
            let packages = FileManager.default.enumerator(atPath: corpus.appending("packages").string)?.allObjects
                as? [String] ?? []
            sources += packages.filter { $0.hasSuffix("/StoreContent/persistentStore") }.sorted().map {
                corpus.appending("packages").appending(String($0.dropLast("/StoreContent/persistentStore".count)))
            }
        }
        var pairs: [(document: String, store: String)] = []
        for (index, source) in sources.enumerated() {
            let subfolder = folder.appending("\(index)")
            try FileManager.default.createDirectory(atPath: subfolder.string, withIntermediateDirectories: true)
            // > A package converts as a folder: copy it whole.
            var isFolder: ObjCBool = false
            if FileManager.default.fileExists(atPath: source.string, isDirectory: &isFolder), isFolder.boolValue {
                let copy = subfolder.appending("src")
                try FileManager.default.createDirectory(atPath: copy.string, withIntermediateDirectories: true)
                try FileManager.default.copyItem(atPath: source.string, toPath: copy.appending(source.lastComponent!).string)
                pairs.append(try convert(copy.appending(source.lastComponent!), into: subfolder))
            } else {
                pairs.append(try convert(source, into: subfolder))
            }
        }
        let rows = try compare(pairs)
        // > The samples alone hold 233 rows; the corpus stores and packages over 400 more.
        #expect(rows > (Self.corpus == nil ? 200 : 600), "the documents hold rows: \(rows)")
        print("mdzvfs: \(pairs.count) documents, \(rows) rows read through python and the shell")
    }

    /// A store of about 12 MiB (text and random blobs) as a document: several digest segments, deflated with restart
    /// points, or stored.
    private func makeLargeDocument(in folder: FilePath, compression: String = "deflate") throws
        -> (document: String, store: String) {
        let store = folder.appending("large-\(compression).sqlite")
        try Fixtures.makeStore(at: store, rows: 9000, blobSize: 1200, seed: 11)
        let document = folder.appending("Large-\(compression).mdz").string
        let created = try Docconvert.run(["create", document, "--from", store.string, "--compression", compression])
        try #require(created.status == 0, "\(created.stderr)")
        let extracted = folder.appending("Large-\(compression).sqlite").string
        try #require(try Docconvert.run(["extract", document, "--output", extracted]).status == 0)
        return (document, extracted)
    }

    /// `bundle` written again by python's zipfile, every entry deflated (`mimetype` stored) or every entry stored:
    /// what another zip tool makes of a document. The restart index no longer describes the store's stream.
    private func repack(_ bundle: String, to target: String, deflating: Bool) throws {
        try Python.run("""
            import sys, zipfile
            with zipfile.ZipFile(sys.argv[1]) as source, zipfile.ZipFile(sys.argv[2], 'w') as target:
                for info in source.infolist():
                    deflate = sys.argv[3] == 'deflate' and info.filename != 'mimetype'
                    target.writestr(info.filename, source.read(info.filename),
                                    compress_type=zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED)
            """, [bundle, target, deflating ? "deflate" : "store"])
    }

    @Test("a multi-segment document, deflated and stored, and repacked by another zip tool: row for row")
    func multiSegmentAndRepacked() throws {
        try #require(SQLiteHosts.unavailable == nil, "\(SQLiteHosts.unavailable ?? "")")
        let folder = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: folder.string) }  // Squash cleanup error.
        let deflated = try makeLargeDocument(in: folder)
        let stored = try makeLargeDocument(in: folder, compression: "store")
        let repackedDeflated = folder.appending("Repacked-deflated.mdz").string
        let repackedStored = folder.appending("Repacked-stored.mdz").string
        try repack(deflated.document, to: repackedDeflated, deflating: true)
        try repack(deflated.document, to: repackedStored, deflating: false)
        // > The small samples repacked deflated are served whole; this one (over 4 MiB) is extracted, and says so.
        let small = try convert(Self.samples.appending("TasteB.sqlite"), into: folder)
        let repackedSmall = folder.appending("Repacked-small.mdz").string
        try repack(small.document, to: repackedSmall, deflating: true)
        let rows = try compare([deflated, stored, (repackedDeflated, deflated.store), (repackedStored, deflated.store),
                                (repackedSmall, small.store)])
        #expect(rows >= 4 * 9000, "\(rows) rows")
        let notice = try SQLiteHosts.shell(repackedDeflated, ["SELECT count(*) FROM note"])
        #expect(notice.stdout == "9000\n", "\(notice.stderr)")
        #expect(notice.stderr.contains("was extracted to be read, in ") && notice.stderr.contains("into an unnamed file") && notice.stderr.contains(", because"), "\(notice.stderr)")
    }

    @Test("writes get SQLite's read-only error, with or without mode=ro; the log says how to edit a document")
    func writesRefused() throws {
        try #require(SQLiteHosts.unavailable == nil, "\(SQLiteHosts.unavailable ?? "")")
        let folder = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: folder.string) }  // Squash cleanup error.
        let document = try convert(Self.samples.appending("TasteB.sqlite"), into: folder).document
        let before = try Fixtures.bytes(of: FilePath(document))
        for readOnly in [false, true] {
            let shell = try SQLiteHosts.shell(document, ["DELETE FROM ZDISH"], readOnly: readOnly)
            #expect(shell.status != 0)
            #expect(shell.stderr.contains("attempt to write a readonly database"), "\(shell.stderr)")
            if !readOnly {
                #expect(shell.stderr.contains("served read-only by the mdz VFS") && shell.stderr.contains("docconvert"),
                        "\(shell.stderr)")
            }
        }
        let python = try SQLiteHosts.runPython("""
            import sqlite3, sys
            loader = sqlite3.connect(':memory:'); loader.enable_load_extension(True); loader.load_extension(sys.argv[1])
            for uri in (sys.argv[2], sys.argv[2] + '&mode=ro'):
                con = sqlite3.connect(uri, uri=True)
                for statement in ('DELETE FROM ZDISH', 'CREATE TABLE t(x)', 'PRAGMA user_version = 7', 'VACUUM'):
                    try:
                        con.execute(statement); con.commit(); print('written:', statement)
                    except sqlite3.OperationalError as error:
                        print(error)
            """, [SQLiteHosts.uri(document)])
        #expect(python.status == 0, "\(python.stderr)")
        #expect(!python.stdout.contains("written:"), "\(python.stdout)")
        #expect(python.stdout.components(separatedBy: "attempt to write a readonly database").count - 1 >= 6,
                "\(python.stdout)")
        #expect(try Fixtures.bytes(of: FilePath(document)) == before, "the document was not changed")
    }

    @Test("loaded twice, documents and a plain database attached, temporary tables and sorts; only the host's SQLite called")
    func oddMoments() throws {
        try #require(SQLiteHosts.unavailable == nil, "\(SQLiteHosts.unavailable ?? "")")
        let folder = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: folder.string) }  // Squash cleanup error.
        let taste = try convert(Self.samples.appending("TasteB.sqlite"), into: folder).document
        let diary = try convert(Self.samples.appending("Diary.sqlite"), into: folder).document
        try #require(try execute("sqlite3", [folder.appending("plain.sqlite").string, "CREATE TABLE seed(x)"]).status == 0)
        let python = try SQLiteHosts.runPython("""
            import sqlite3, sys
            for _ in range(2):
                loader = sqlite3.connect(':memory:'); loader.enable_load_extension(True); loader.load_extension(sys.argv[1])
                loader.load_extension(sys.argv[1])
            con = sqlite3.connect(sys.argv[2], uri=True)
            con.execute("ATTACH DATABASE ? AS diary", (sys.argv[3],))
            # A plain database attached beside the documents inherits the VFS: served as without the extension.
            con.execute("ATTACH DATABASE ? AS plain", (sys.argv[4],))
            con.execute("CREATE TABLE plain.kept(x)"); con.execute("INSERT INTO plain.kept VALUES (1)"); con.commit()
            # A mistyped document's name creates nothing.
            try:
                sqlite3.connect(sys.argv[5], uri=True).execute('SELECT 1 FROM sqlite_schema')
                print('opened a missing document')
            except sqlite3.OperationalError:
                pass
            tables = con.execute("SELECT count(*) FROM sqlite_schema").fetchone()[0]
            attached = con.execute("SELECT count(*) FROM diary.sqlite_schema").fetchone()[0]
            con.execute('PRAGMA temp_store = FILE')
            con.execute('CREATE TEMP TABLE names AS SELECT name FROM sqlite_schema UNION ALL SELECT name FROM diary.sqlite_schema')
            temp = con.execute('SELECT count(*) FROM names').fetchone()[0]
            ordered = con.execute('SELECT name FROM names ORDER BY name DESC').fetchall()
            print(tables, attached, temp, len(ordered))
            """, [SQLiteHosts.uri(taste), SQLiteHosts.uri(diary), folder.appending("plain.sqlite").string,
                  SQLiteHosts.uri(folder.appending("Mistyped.mdz").string)])
        #expect(python.status == 0, "\(python.stderr)")
        let counts = python.stdout.split(separator: " ").compactMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        #expect(!FileManager.default.fileExists(atPath: folder.appending("Mistyped.mdz").string))
        let kept = try execute("sqlite3", ["-readonly", folder.appending("plain.sqlite").string, "SELECT x FROM kept"])
        #expect(kept.stdout == "1\n", "\(kept.stdout) \(kept.stderr)")
        #expect(counts.count == 4 && counts[0] > 0 && counts[1] > 0 && counts[2] == counts[0] + counts[1]
                && counts[3] == counts[2], "\(python.stdout)")
        // > Every SQLite call goes through the host's routines: the library names no SQLite symbol, and exports only
        // > its two entry points.
        let undefined = try execute("nm", ["-D", "--undefined-only", SQLiteHosts.library])
        #expect(undefined.status == 0 && !undefined.stdout.isEmpty && !undefined.stdout.contains("sqlite3_"),
                "\(undefined.stdout.split(separator: "\n").filter { $0.contains("sqlite3_") })")
        let exported = try execute("nm", ["-D", "--defined-only", "--extern-only", SQLiteHosts.library])
        let functions = exported.stdout.split(separator: "\n").filter { $0.contains(" T ") }.map { $0.split(separator: " ").last ?? "" }
        #expect(functions.sorted() == ["sqlite3_mdzvfs_default_init", "sqlite3_mdzvfs_init"], "\(functions)")
    }

    @Test("damaged and hostile bundles: an error and no rows (a damaged later segment: an error, never a wrong row)")
    func damagedAndHostile() throws {
        try #require(SQLiteHosts.unavailable == nil, "\(SQLiteHosts.unavailable ?? "")")
        let folder = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: folder.string) }  // Squash cleanup error.
        let stored = try makeLargeDocument(in: folder, compression: "store")
        var bytes = try Fixtures.bytes(of: FilePath(stored.document))
        let storeStart = try #require(Self.dataOffset(of: "StoreContent/persistentStore", in: bytes))
        // > Page 1's segment damaged: nothing opens. A later segment damaged: the rows before it, then an error.
        var first = bytes
        first[storeStart + 5000] ^= 0x5A
        let damagedFirst = folder.appending("Damaged-first.mdz").string
        try Fixtures.write(first, to: FilePath(damagedFirst))
        bytes[storeStart + 9_000_000] ^= 0x5A
        let damagedLater = folder.appending("Damaged-later.mdz").string
        try Fixtures.write(bytes, to: FilePath(damagedLater))

        // > A FIFO with no writer: opening it for reading would wait forever; it must be refused at once.
        let fifo = folder.appending("Fifo.mdz").string
        try #require(mkfifo(fifo, 0o600) == 0)
        var hostile = [damagedFirst, folder.appending("Missing.mdz").string, fifo]
        if let corpus = Self.corpus {
            hostile += ["zip-bombs/overlap.zip", "zip-bombs/zbsm.zip", "zip-bombs/zb64.zip", "zip-real/zip-slip/zip-slip.zip"]
                .map { corpus.appending($0).string }.filter { FileManager.default.fileExists(atPath: $0) }
        }
        let lies = folder.appending("Lies.mdz").string
        try Python.rewritingMetadata(of: stored.document, to: lies, [("store.size", "123456789012")])
        hostile.append(lies)
        for path in hostile {
            let shell = try SQLiteHosts.shell(path, ["SELECT * FROM note"])
            #expect(shell.status != 0 && shell.stdout.isEmpty, "\(path): \(shell.stdout.prefix(200))")
            #expect(shell.stderr.contains("mdz: "), "\(path): the log names the reason: \(shell.stderr)")
            let python = try SQLiteHosts.runPython(Self.readAll, [SQLiteHosts.uri(path, readOnly: true)],
                                                   environment: ["MDZVFS_LOG": "stderr"])
            #expect(python.status == 0 && python.stdout.hasPrefix("error after 0 rows:"), "\(path): \(python.stdout)")
            #expect(python.stderr.contains("mdz: "), "\(path): \(python.stderr)")
        }
        // > Every row python read before the damaged segment is the original's, in order.
        let later = try SQLiteHosts.runPython(Self.readAll, [SQLiteHosts.uri(damagedLater, readOnly: true)])
        #expect(later.stdout.hasPrefix("error after"), "\(later.stdout)")
        let original = try SQLiteHosts.runPython(Self.readAll, [SQLiteHosts.uri(stored.document, readOnly: true)])
        #expect(original.stdout.hasPrefix("read 9000 rows"), "\(original.stdout)")
        let readBefore = later.stdout.split(separator: "\n").dropFirst()
        #expect(!readBefore.isEmpty && original.stdout.split(separator: "\n").dropFirst().starts(with: readBefore))
    }

    /// Python reading every row of `item` through the extension: `read N rows` or `error after N rows: …`, then one
    /// digest line a row.
    private static let readAll = """
        import hashlib, sqlite3, sys
        loader = sqlite3.connect(':memory:'); loader.enable_load_extension(True); loader.load_extension(sys.argv[1])
        rows = []
        try:
            con = sqlite3.connect(sys.argv[2], uri=True)
            for row in con.execute('SELECT * FROM note'):
                rows.append(hashlib.sha256(repr(row).encode()).hexdigest())
            print('read %d rows' % len(rows))
        except sqlite3.Error as error:
            print('error after %d rows: %s' % (len(rows), error))
        print('\\n'.join(rows))
        """

    /// Where `name`'s data starts in a zip's bytes (its local header's offset, read from the central directory).
    private static func dataOffset(of name: String, in bytes: [UInt8]) -> Int? {
        func u16(_ at: Int) -> Int { Int(bytes[at]) | Int(bytes[at + 1]) << 8 }
        func u32(_ at: Int) -> Int { u16(at) | u16(at + 2) << 16 }
        guard let end = stride(from: bytes.count - 22, through: 0, by: -1).first(where: { u32($0) == 0x0605_4B50 })
        else { return nil }
        var at = u32(end + 16)
        for _ in 0..<u16(end + 10) {
            let nameLength = u16(at + 28), extra = u16(at + 30), comment = u16(at + 32)
            if String(decoding: bytes[(at + 46)..<(at + 46 + nameLength)], as: UTF8.self) == name {
                let local = u32(at + 42)
                return local + 30 + u16(local + 26) + u16(local + 28)
            }
            at += 46 + nameLength + extra + comment
        }
        return nil
    }
}
