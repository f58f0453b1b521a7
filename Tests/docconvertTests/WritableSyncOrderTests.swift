import Foundation
import SystemPackage
import TestSupport
import Testing

/// The order of the flushes of a writable document served from its bundle (FORMAT.md 16.2), seen by strace around
/// the built binary: a commit's overlay data is flushed before the map record that names it, the pending-base record
/// before the new bundle takes the name, the bundle before that rename, and the folder after it.
@Suite("writable documents: the order of their flushes")
struct WritableSyncOrderTests {
    @Test("strace of a one-row migrate: overlay before map, pending base and bundle before the rename, folder after",
          .enabled(if: Tools.straceUnavailable == nil, Comment(rawValue: Tools.straceUnavailable ?? "")))
    func flushOrder() throws {
        let directory = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory.string) }  // Squash cleanup error.
        let store = directory.appending("s.sqlite").string
        try Python.run("""
            import sqlite3, sys
            db = sqlite3.connect(sys.argv[1])
            db.execute("CREATE TABLE note(id INTEGER PRIMARY KEY, body TEXT)")
            db.executemany("INSERT INTO note(body) VALUES (?)", [(f"note {i} " * 12,) for i in range(20000)])
            db.commit()
            """, [store])
        let bundle = directory.appending("D.mdz").string
        #expect(try Docconvert.run(["create", bundle, "--from", store]).status == 0)
        let migrations = directory.appending("m")
        try FileManager.default.createDirectory(atPath: migrations.string, withIntermediateDirectories: true)
        try Data("INSERT INTO note(body) VALUES ('one more');".utf8)
            .write(to: URL(fileURLWithPath: migrations.appending("V1__one.sql").string))
        let trace = directory.appending("trace.txt").string
        let traced = try execute("/usr/bin/strace", ["-f", "-y", "-e", "trace=fdatasync,fsync,rename,linkat", "-o", trace,
                                                     Docconvert.binary, "migrate", bundle, "--migrations", migrations.string])
        #expect(traced.status == 0, "\(traced.stderr)")
        let lines = try String(contentsOfFile: trace, encoding: .utf8).split(separator: "\n").map(String.init)
            .filter { !$0.contains("ENOENT") && !$0.contains("resumed") }
        func first(after start: Int, _ match: (String) -> Bool) -> Int? {
            lines.indices.first { $0 > start && match(lines[$0]) }
        }
        let overlaySync = try #require(first(after: -1) { $0.contains("fdatasync(") && $0.contains("/overlay>") },
                                       "the commit flushes the overlay: \(lines)")
        let recordSync = try #require(first(after: overlaySync) { $0.contains("fdatasync(") && $0.contains("/map>") },
                                      "then the map that names its pages")
        let rename = try #require(first(after: recordSync) {
            $0.contains("rename(") && $0.contains(".D.mdz.") && $0.contains("D.mdz\")")
        }, "the new bundle takes its name")
        #expect(lines[(recordSync + 1)..<rename].contains { $0.contains("fdatasync(") && $0.contains("/map>") },
                "the pending-base record is flushed before the rename")
        // > The bundle is written without a name first (O_TMPFILE): strace shows it as deleted, or by its temporary name.
        #expect(lines[(recordSync + 1)..<rename].contains {
            $0.contains("fsync(") && ($0.contains("(deleted)") || $0.contains(".D.mdz."))
        }, "the bundle is flushed before the rename")
        let folder = directory.string
        #expect(first(after: rename) { $0.contains("fsync(") && $0.contains("<\(folder)>)") } != nil,
                "the folder is flushed after the rename")
    }
}
