// A document the user may not write is not rewritten; a read-only document refuses writes with the library's error;
// a save never starts more deflate threads than there are cores, whatever an app asks.
import Foundation
import GRDB
import ManagedDocument
import SystemPackage
import Testing
import TestSupport

@Suite("Write permissions and save threads, as an app meets them")
struct WritePermissionTests {
    @Test("a bundle of mode 0444 in a folder the user may write is refused for writing (readOnly), and left as it was")
    func readOnlyFile() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            let made = try NotesApp.run([bundle.string, "add", "first"], in: folder)
            #expect(made.status == 0, "\(made.output)")
            #expect(chmod(folder.string, 0o777) == 0)
            #expect(chmod(bundle.string, 0o444) == 0)
            let before = try Data(contentsOf: URL(fileURLWithPath: bundle.string))
            let app = try NotesApp.run([bundle.string, "add", "second"], in: folder, unprivileged: true)
            #expect(app.status != 0, "\(app.output)")
            #expect(app.output.contains("cannot be opened for writing") && app.output.contains("0444"), "\(app.output)")
            #expect(try Data(contentsOf: URL(fileURLWithPath: bundle.string)) == before)
            var mode = stat()
            #expect(stat(bundle.string, &mode) == 0 && mode.st_mode & 0o777 == 0o444)
            // > Read-only, the same user reads it.
            let listed = try NotesApp.run([bundle.string, "list", "--read-only"], in: folder, unprivileged: true)
            #expect(listed.status == 0 && listed.output.contains("first"), "\(listed.output)")
        }
    }

    @Test("a write through a read-only document's writer throws DocumentError readOnly, not SQLite's error")
    func writerOfReadOnlyDocument() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            try await Document.withDocument(at: bundle, options: appOptions(folder)) { document in
                try await document.writer.write { db in try db.execute(sql: "CREATE TABLE note(text TEXT)") }
            }
            var options = appOptions(folder)
            options.isReadOnly = true
            let document = try await Document.open(at: bundle, options: options)
            let error = await #expect(throws: DocumentError.self) {
                try await document.writer.write { db in try db.execute(sql: "INSERT INTO note VALUES ('x')") }
            }
            #expect(error?.code == .readOnly, "\(String(describing: error))")
            #expect(error?.path == bundle)
            #expect(try await document.reader.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM note") } == 0)
            try await document.close()
        }
    }

    @Test("compressionThreads far above the cores: a save starts no more threads than there are cores, and writes the same bytes")
    func compressionThreadsBounded() async throws {
        try await withTemporaryDirectory { folder in
            func save(threads: Int, to bundle: FilePath) async throws -> Int {
                var options = appOptions(folder)
                options.saving.compressionThreads = threads
                options.saving.modificationTime = Date(timeIntervalSince1970: 1_700_000_000)
                let document = try await Document.open(at: bundle, options: options)
                try await document.writer.write { db in
                    try db.execute(sql: "CREATE TABLE t(id INTEGER PRIMARY KEY, body BLOB)")
                    try db.execute(sql: "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 3000) INSERT INTO t SELECT i, zeroblob(2000) || i FROM r")
                }
                let peak = ThreadCounter()
                peak.start()
                try await document.save()
                let threads = peak.stop()
                try await document.close()
                return threads
            }
            let baseline = ThreadCounter.current()
            let many = try await save(threads: 20_000, to: folder.appending("Many.mdz"))
            let cores = ProcessInfo.processInfo.activeProcessorCount
            #expect(many <= baseline + cores + 16, "peak \(many) threads with 20,000 asked, \(baseline) before, \(cores) cores")
            _ = try await save(threads: cores, to: folder.appending("Cores.mdz"))
            let a = try BundleReader(at: folder.appending("Many.mdz")).metadata.store
            let b = try BundleReader(at: folder.appending("Cores.mdz")).metadata.store
            #expect(a.contentDigest == b.contentDigest && a.deflateRestarts?.compressedSize == b.deflateRestarts?.compressedSize)
        }
    }
}

/// Samples the process's thread count (`/proc/self/task`) every millisecond on a thread of its own; the peak.
private final class ThreadCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var peak = 0
    private var running = false
    private var thread: Thread?

    static func current() -> Int {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").count) ?? 0
    }

    func start() {
        running = true
        let thread = Thread { [self] in
            while lock.withLock({ running }) {
                let count = Self.current()
                lock.withLock { peak = max(peak, count) }
                usleep(1000)
            }
        }
        self.thread = thread
        thread.start()
    }

    func stop() -> Int {
        lock.withLock { running = false }
        usleep(5000)
        return lock.withLock { peak }
    }
}
