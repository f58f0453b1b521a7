import Foundation
import GRDB
import ManagedDocument
import Synchronization
import SystemPackage
import TestSupport
import Testing

/// What an app loses around its bundles rather than inside them: a FIFO that would hang an open, bundles a batch
/// wrote in hidden folders that a later search misses, migrations refused for an app's own media type, messages in
/// Swift's words rather than the format's.
@Suite("nothing lost outside the bundle, from an app")
struct NothingLostOutsideTests {
    /// A legacy store of `rows` notes, made through GRDB.
    private func makeStore(at path: FilePath, rows: Int) throws {
        try FileManager.default.createDirectory(atPath: path.removingLastComponent().string,
                                                withIntermediateDirectories: true)
        let queue = try DatabaseQueue(path: path.string)
        try queue.write { db in
            try db.execute(sql: "CREATE TABLE note(id INTEGER PRIMARY KEY, title TEXT)")
            for row in 0..<rows { try db.execute(sql: "INSERT INTO note(title) VALUES (?)", arguments: ["note \(row)"]) }
        }
        try queue.close()
    }

    @Test("opening a FIFO named like a bundle returns at once: not a regular file")
    func fifo() async throws {
        try await withTemporaryDirectory { folder in
            let fifo = folder.appending("x.mdz")
            #expect(mkfifo(fifo.string, 0o600) == 0)
            let started = Date()
            // > Before the fix the open blocked for a writer that never comes; the test would time out.
            let opening = Task {
                var options = appOptions(folder)
                options.createIfMissing = false
                return try await Document.open(at: fifo, options: options)
            }
            let watchdog = Task {
                try await Task.sleep(nanoseconds: 20_000_000_000)
                // > Unblock a hung open so the suite ends, and fail: a writer end opened then closed.
                let writer = open(fifo.string, O_WRONLY | O_NONBLOCK)
                if writer >= 0 { close(writer) }
            }
            defer { watchdog.cancel() }
            let error = await #expect(throws: DocumentError.self) { _ = try await opening.value }
            #expect(Date().timeIntervalSince(started) < 10, "the open waited for a writer")
            #expect(error?.code == .notADocument)
            #expect(error?.description.contains("is not a regular file") == true, "\(String(describing: error))")
            let metadata = #expect(throws: DocumentError.self) { _ = try Document.metadata(at: fifo) }
            #expect(metadata?.code == .notADocument)
        }
    }
}
