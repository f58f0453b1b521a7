import Foundation
import GRDB
import Glibc
import ManagedDocument
import SystemPackage
import TestSupport
import Testing

/// The package's folder (this file is Tests/DocumentAppTests/ServedIsZippedTests.swift).
private let packageRoot = FilePath(#filePath).removingLastComponent().removingLastComponent().removingLastComponent()

/// A document of about 2 MiB of text rows: deflated, with a restart index of 128 KiB segments and segment digests.
private func makeDocument(_ bundle: FilePath, folder: FilePath, rows: Int = 1500) async throws {
    var options = appOptions(folder)
    options.workingDirectory = folder.appending("writer")
    let document = try await Document.open(at: bundle, options: options)
    try await document.writer.write { db in
        try db.execute(sql: "CREATE TABLE note(id INTEGER PRIMARY KEY, body TEXT)")
        for index in 0..<rows {
            try db.execute(sql: "INSERT INTO note(id, body) VALUES (?, ?)",
                           arguments: [index, String(repeating: "note \(index) ", count: 80)])
        }
    }
    try await document.close()
}

/// One bundle of the polyglot family that `scripts/hostile/polyglot.py` writes.
private struct Polyglot {
    var name: String
    var path: FilePath
    /// What every zip tool reads from the store entry (one deflate stream), written beside; `nil` when they fail.
    var zipToolsFile: FilePath?
    var note: String
}

/// The polyglot family made from `bundle` into `folder`.
private func polyglots(of bundle: FilePath, in folder: FilePath) throws -> [Polyglot] {
    let script = packageRoot.appending("scripts/hostile/polyglot.py").string
    let result = try execute("python3", [script, bundle.string, folder.string])
    try #require(result.status == 0, "polyglot.py: \(result.stderr)")
    return try result.stdout.split(separator: "\n").map { line in
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        return Polyglot(name: object["name"] as? String ?? "?", path: FilePath(object["path"] as? String ?? ""),
                        zipToolsFile: (object["zipToolsFile"] as? String).map { FilePath($0) },
                        note: object["note"] as? String ?? "")
    }
}

/// The content of the store every zip tool reads, when SQLite can read all of it.
private func zipToolsContent(_ polyglot: Polyglot) -> StoreContent? {
    guard let file = polyglot.zipToolsFile else { return nil }
    var configuration = Configuration()
    configuration.readonly = true
    guard let queue = try? DatabaseQueue(path: file.string, configuration: configuration) else { return nil }
    return try? queue.read { db in try StoreContent(db) }
}

@Suite("What a reader serves is what the zip holds", .serialized, .serialChain)
struct ServedIsZippedTests {
    @Test("a store entry that reads as one store in one stream and another segment by segment: every reader refuses it or serves what zip tools read")
    func polyglotFamily() async throws {
        try #require(SQLiteHosts.unavailable == nil, "\(SQLiteHosts.unavailable ?? "")")
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            try await makeDocument(bundle, folder: folder)
            let family = try polyglots(of: bundle, in: folder)
            #expect(Set(family.map(\.name)) == ["polyglot", "polyglot-segment-crc", "wrong-crc", "no-final-block",
                                                "final-mid-stream"])
            for polyglot in family {
                let expected = zipToolsContent(polyglot)
                let label = "\(polyglot.name) (\(polyglot.note))"

                // A read-only document and a writable one, as an app opens them.
                for readOnly in [true, false] {
                    var options = appOptions(folder)
                    options.createIfMissing = false
                    options.isReadOnly = readOnly
                    options.workingDirectory = folder.appending("working-\(polyglot.name)-\(readOnly)")
                    do {
                        let document = try await Document.open(at: polyglot.path, options: options)
                        let served = try await document.reader.read { db in try StoreContent(db) }
                        try? await document.close()
                        #expect(served == expected, "\(label): a \(readOnly ? "read-only" : "writable") document served rows no zip tool reads")
                    } catch {
                        // Refused: what it must say is that the bundle is damaged, not that it is missing.
                        #expect(!"\(error)".contains("no such file"), "\(label): \(error)")
                    }
                }

                // docconvert query (the library, in place) and verify.
                let query = try Docconvert.run(["query", polyglot.path.string, "SELECT count(*), sum(length(body)) FROM note"])
                if query.status == 0 {
                    let counted = try expected.map { _ in
                        try DatabaseQueue(path: polyglot.zipToolsFile!.string).read { db in
                            try Row.fetchOne(db, sql: "SELECT count(*), sum(length(body)) FROM note")
                        }
                    }
                    let line = query.stdout.split(separator: "\n").last.map(String.init) ?? ""
                    #expect(counted != nil && line == "\(counted!![0] as Int)\t\(counted!![1] as Int)",
                            "\(label): docconvert query served \(line)")
                }
                let verified = try Docconvert.run(["verify", polyglot.path.string])
                #expect(verified.status != 0, "\(label): verify passed it")

                // Python through the extension.
                let served = try SQLiteHosts.runPython(SQLiteHosts.tableDigests, ["mdz:" + polyglot.path.string])
                if served.status == 0 {
                    let file = try #require(polyglot.zipToolsFile, "\(label): the extension served rows, zip tools read none")
                    let seen = try SQLiteHosts.runPython(SQLiteHosts.tableDigests, [file.string])
                    #expect(seen.status == 0 && seen.stdout == served.stdout,
                            "\(label): the extension served rows no zip tool reads")
                }
            }
        }
    }

    @Test("a store the extension must extract goes into a file without a name: a host killed mid-extraction leaves nothing in TMPDIR")
    func killedExtractionLeavesNothing() async throws {
        try #require(SQLiteHosts.unavailable == nil, "\(SQLiteHosts.unavailable ?? "")")
        try await withTemporaryDirectory { folder in
        let bundle = try makeRepackedLargeDocument(in: folder, megabytes: 160)
        let temporary = folder.appending("tmp")
        try FileManager.default.createDirectory(atPath: temporary.string, withIntermediateDirectories: true)

        // The host reads one row; it is killed as soon as it holds a file in TMPDIR open (mid-extraction).
        let reader = """
            import sqlite3, sys
            loader = sqlite3.connect(':memory:'); loader.enable_load_extension(True); loader.load_extension(sys.argv[1])
            con = sqlite3.connect('file:' + sys.argv[2] + '?vfs=mdz&mode=ro', uri=True)
            print(con.execute('SELECT count(*) FROM blob').fetchone()[0], flush=True)
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: SQLiteHosts.python)
        process.arguments = ["-c", reader, SQLiteHosts.library, bundle.string]
        process.environment = ProcessInfo.processInfo.environment.merging(["TMPDIR": temporary.string]) { $1 }
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        let deadline = Date().addingTimeInterval(60)
        var held: String?
        while held == nil, process.isRunning, Date() < deadline {
            let descriptors = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(process.processIdentifier)/fd")) ?? []
            held = descriptors.lazy.compactMap { try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(process.processIdentifier)/fd/\($0)") }
                .first { $0.hasPrefix(temporary.string) }
            if held == nil { usleep(2_000) }
        }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        let target = try #require(held, "the host never opened a file in TMPDIR (it extracted nothing, or finished first)")
        #expect(target.hasSuffix("(deleted)"), "the extracted store had a name while it was written: \(target)")
        let left = FileManager.default.enumerator(atPath: temporary.string)?.allObjects as? [String] ?? []
        #expect(left.isEmpty, "a killed extraction left \(left) in TMPDIR")

        // Killed or not, the extraction works when let run: the same rows, and nothing left after the host exits.
        let done = try execute(SQLiteHosts.python, ["-c", reader, SQLiteHosts.library, bundle.string],
                               environment: ProcessInfo.processInfo.environment.merging(["TMPDIR": temporary.string]) { $1 })
        #expect(done.status == 0 && done.stdout == "160\n", "\(done.stderr)")
        #expect(FileManager.default.enumerator(atPath: temporary.string)?.allObjects.isEmpty != false)
        }
    }

    @Test("an extraction larger than TMPDIR's free space is refused before it writes, saying so",
          .enabled(if: getuid() == 0, "mounting a small tmpfs needs root"))
    func extractionChecksFreeSpace() async throws {
        try #require(SQLiteHosts.unavailable == nil, "\(SQLiteHosts.unavailable ?? "")")
        try await withTemporaryDirectory { folder in
        let bundle = try makeRepackedLargeDocument(in: folder, megabytes: 40)
        let small = folder.appending("small-tmp")
        try FileManager.default.createDirectory(atPath: small.string, withIntermediateDirectories: true)
        let mounted = try execute("mount", ["-t", "tmpfs", "-o", "size=8m", "tmpfs", small.string])
        try #require(mounted.status == 0, "root, but cannot mount a tmpfs here: \(mounted.stderr)")
        defer { _ = try? execute("umount", [small.string]) }
        let result = try SQLiteHosts.runPython("""
            import sqlite3, sys
            loader = sqlite3.connect(':memory:'); loader.enable_load_extension(True); loader.load_extension(sys.argv[1])
            try:
                sqlite3.connect('file:' + sys.argv[2] + '?vfs=mdz&mode=ro', uri=True).execute('SELECT count(*) FROM blob')
                print('served')
            except sqlite3.Error as error:
                print('refused:', error)
            """, [bundle.string], environment: ProcessInfo.processInfo.environment.merging(["TMPDIR": small.string, "MDZVFS_LOG": "stderr"]) { $1 })
        #expect(result.stdout.hasPrefix("refused:"), "\(result.stdout) \(result.stderr)")
        #expect(result.stderr.contains("bytes free") && result.stderr.contains("TMPDIR"), "\(result.stderr)")
        #expect(FileManager.default.enumerator(atPath: small.string)?.allObjects.isEmpty != false)
        }
    }
}

extension ServedIsZippedTests {
    @Test("twenty connections to a bundle listing 99,990 additional files: the metadata parsed once, under 1 MiB a connection beyond its segment cache")
    func memoryPerDocument() async throws {
        try #require(SQLiteHosts.unavailable == nil, "\(SQLiteHosts.unavailable ?? "")")
        try await withTemporaryDirectory { folder in
            let small = folder.appending("Small.mdz")
            try await makeDocument(small, folder: folder, rows: 40)
            let crowded = folder.appending("Crowded.mdz")
            // > 99,990 files of 9 bytes each, listed in the metadata: within the default limits (100,000 entries,
            // > 16 MiB of metadata), as a zip tool or another writer may make them.
            let made = try execute("python3", ["-c", """
                import hashlib, json, sys, zipfile
                with zipfile.ZipFile(sys.argv[1]) as source, zipfile.ZipFile(sys.argv[2], 'w') as target:
                    metadata = json.loads(source.read('DocumentMetadata.json'))
                    for info in source.infolist():
                        if info.filename != 'DocumentMetadata.json':
                            target.writestr(info, source.read(info.filename))
                    for index in range(99990):
                        name, data = 'AdditionalContent/files/%06d.txt' % index, b'%08d\\n' % index
                        target.writestr(zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0)), data)
                        metadata['entries'].append({'name': name, 'size': len(data), 'sha256': hashlib.sha256(data).hexdigest()})
                    metadata['entries'].sort(key=lambda entry: entry['name'])
                    target.writestr(zipfile.ZipInfo('DocumentMetadata.json', (2020, 1, 1, 0, 0, 0)), json.dumps(metadata))
                """, small.string, crowded.string])
            try #require(made.status == 0, "\(made.stderr)")
            let measured = try SQLiteHosts.runPython("""
                import json, sqlite3, sys, time
                loader = sqlite3.connect(':memory:'); loader.enable_load_extension(True); loader.load_extension(sys.argv[1])
                def rss():
                    for line in open('/proc/self/status'):
                        if line.startswith('VmRSS:'):
                            return int(line.split()[1]) * 1024
                def connect():
                    started = time.monotonic()
                    con = sqlite3.connect('file:' + sys.argv[2] + '?vfs=mdz&mode=ro', uri=True)
                    con.execute('SELECT count(*), sum(length(body)) FROM note').fetchone()
                    return con, time.monotonic() - started
                first, first_seconds = connect()
                base = rss()
                others = [connect() for _ in range(19)]
                print(json.dumps({'perConnection': (rss() - base) / 19, 'firstOpen': first_seconds,
                                  'laterOpen': max(seconds for _, seconds in others)}))
                """, [crowded.string])
            try #require(measured.status == 0, "\(measured.stderr)")
            let figures = try #require(try JSONSerialization.jsonObject(with: Data(measured.stdout.utf8)) as? [String: Double])
            let perConnection = figures["perConnection"] ?? .infinity
            let storeSize = Double(try FileManager.default.attributesOfItem(atPath: small.string)[.size] as? Int ?? 0)
            print("20 connections to a bundle of 99,990 listed files: \(Int(perConnection / 1024)) KiB a connection beyond the first, first open \(figures["firstOpen"] ?? 0) s, later opens at most \(figures["laterOpen"] ?? 0) s")
            // > A connection's cache holds the store once (it is served whole); SQLite's own page cache and schema
            // > come with any connection. The reader's metadata (tens of MB here) must not.
            #expect(perConnection <= Double(1 << 20) + 4 * storeSize, "\(Int(perConnection)) bytes a connection")
            #expect((figures["laterOpen"] ?? .infinity) < 0.25, "a later connection parsed the metadata again: \(figures)")
        }
    }
}

/// A document of `megabytes` MiB of zero blobs, repacked by python's zipfile (deflated, so its restart index is
/// stale): the extension must extract its store to read it.
private func makeRepackedLargeDocument(in folder: FilePath, megabytes: Int) throws -> FilePath {
    let store = folder.appending("large.sqlite")
    let made = try execute("python3", ["-c", """
        import sqlite3, sys
        con = sqlite3.connect(sys.argv[1])
        con.execute('CREATE TABLE blob(id INTEGER PRIMARY KEY, data BLOB)')
        con.executemany('INSERT INTO blob(data) VALUES (zeroblob(1048576))', [()] * int(sys.argv[2]))
        con.commit()
        """, store.string, String(megabytes)])
    try #require(made.status == 0, "\(made.stderr)")
    let bundle = folder.appending("large.mdz")
    let created = try Docconvert.run(["create", bundle.string, "--from", store.string])
    try #require(created.status == 0, "\(created.stderr)")
    let repacked = folder.appending("repacked.mdz")
    let zipped = try execute("python3", ["-c", """
        import sys, zipfile
        with zipfile.ZipFile(sys.argv[1]) as source, zipfile.ZipFile(sys.argv[2], 'w') as target:
            for info in source.infolist():
                kind = zipfile.ZIP_STORED if info.filename == 'mimetype' else zipfile.ZIP_DEFLATED
                target.writestr(info, source.read(info.filename), compress_type=kind)
        """, bundle.string, repacked.string])
    try #require(zipped.status == 0, "\(zipped.stderr)")
    try FileManager.default.removeItem(atPath: store.string)
    return repacked
}
