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
            /// Runs an app that saves 3,000 rows of 2 KiB with `threads`, sampling its thread count as it runs.
            func save(threads: Int, to bundle: FilePath) throws -> Int {
                let app = try NotesApp([bundle.string, "add", "--bulk", "3000", "--compression-threads", "\(threads)"],
                                       in: folder)
                var peak = 0
                let tasks = "/proc/\(app.process.processIdentifier)/task"
                while app.process.isRunning {
                    peak = max(peak, (try? FileManager.default.contentsOfDirectory(atPath: tasks).count) ?? 0)
                    usleep(500)
                }
                let result = app.finish()
                #expect(result.status == 0, "\(result.output)")
                return peak
            }
            let cores = ProcessInfo.processInfo.activeProcessorCount
            let few = try save(threads: cores, to: folder.appending("Cores.mdz"))
            // The runtime's own threads come and go with the machine's load, so one sample can count a few more:
            // the least of up to three runs is compared. A save that started a thread per asked thread would count
            // thousands in every run.
            var many = Int.max
            for attempt in 1...3 where many > few + 4 {
                try? FileManager.default.removeItem(atPath: folder.appending("Many.mdz").string)
                many = min(many, try save(threads: 20_000, to: folder.appending("Many.mdz")))
                if attempt > 1 { print("compressionThreadsBounded: run \(attempt), least peak \(many)") }
            }
            #expect(many <= few + 4, "peak \(many) threads with 20,000 asked, \(few) with \(cores) (the cores)")
            let a = try BundleReader(at: folder.appending("Many.mdz")).metadata.store
            let b = try BundleReader(at: folder.appending("Cores.mdz")).metadata.store
            #expect(a.size == b.size && a.segments?.interval == b.segments?.interval)
        }
    }
}

