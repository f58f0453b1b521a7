import Foundation
import GRDB
import ManagedDocument
import Synchronization
import SystemPackage
import TestSupport
import Testing

/// What an app developer meets first: a batch over a relative root, and the advice for a loose store.
@Suite("the first hour, from an app")
struct FirstHourTests {
    /// `path` written relative to the current folder (`../../tmp/…`), without changing the current folder, which
    /// tests running beside this one share.
    private func relativeToCurrentFolder(_ path: FilePath) -> FilePath {
        let here = FilePath(FileManager.default.currentDirectoryPath).lexicallyNormalized().components.map(\.string)
        let there = path.lexicallyNormalized().components.map(\.string)
        var common = 0
        while common < min(here.count, there.count), here[common] == there[common] { common += 1 }
        let up = Array(repeating: "..", count: here.count - common)
        return FilePath((up + there[common...]).joined(separator: "/"))
    }

    @Test("BatchConverter takes a relative root from the current folder, and reports items relative to it")
    func relativeRoot() async throws {
        let here = FilePath(FileManager.default.currentDirectoryPath).lexicallyNormalized()
        #expect(BatchConverter(root: ".").root == here)
        #expect(BatchConverter(root: "./").root == here)
        try await withTemporaryDirectory { folder in
            let relative = relativeToCurrentFolder(folder)
            for (index, form) in ["./\(relative)", "\(relative)/sub/..", "\(relative)/./sub"].enumerated() {
                let sub = folder.appending("sub")
                try FileManager.default.createDirectory(atPath: sub.string, withIntermediateDirectories: true)
                try Fixtures.makeListStore(at: sub.appending("Notes\(index).sqlite"), rows: 3)
                var options = BatchOptions()
                options.conversion.legacyPolicy = .keep
                options.jobs = 1
                let batch = BatchConverter(root: FilePath(form), options: options)
                #expect(batch.root.isAbsolute, "\(form)")
                let items = Mutex<[BatchItem]>([])
                let summary = try await batch.run { item in items.withLock { $0.append(item) } }
                let converted = items.withLock { $0 }.filter { $0.outcome == .converted }
                let expected = form.hasSuffix("sub") ? "Notes\(index).sqlite" : "sub/Notes\(index).sqlite"
                #expect(converted.map(\.source) == [expected], "\(form): \(items.withLock { $0 })")
                #expect(summary.count(.failed) == 0)
            }
        }
    }

    @Test("opening a loose SQLite store names the library's converter, not a shell command")
    func looseStoreAdvice() async throws {
        try await withTemporaryDirectory { folder in
            let store = folder.appending("Notes.sqlite")
            try Fixtures.makeListStore(at: store, rows: 2)
            var options = appOptions(folder)
            options.createIfMissing = false
            let error = await #expect(throws: DocumentError.self) { try await Document.open(at: store, options: options) }
            #expect(error?.code == .notADocument)
            #expect(error?.path == store)
            #expect(error?.reason.contains("LegacyConverter") == true, "\(String(describing: error))")
            #expect(error?.reason.contains("legacyStoreLocations") == true, "\(String(describing: error))")
            #expect(error?.reason.contains("docconvert") == false, "\(String(describing: error))")
        }
    }
}
