import Foundation
import GRDB
import ManagedDocument
import SystemPackage
import TestSupport
import Testing

/// Every file below `folder`, relative names.
private func files(below folder: FilePath) -> [String] {
    (FileManager.default.enumerator(atPath: folder.string)?.allObjects as? [String]) ?? []
}

@Suite("Small documents (a store under 1 MiB, every new document) are read in place and saved whole, and say so")
struct SmallDocumentTests {
    @Test("a read-only open of a small document extracts nothing: its store is served from memory, checked first")
    func readInPlace() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            let document = try await Document.open(at: bundle, options: appOptions(folder))
            try await document.writer.write { db in
                try db.execute(sql: "CREATE TABLE note(text TEXT)")
                try db.execute(sql: "INSERT INTO note VALUES ('one'), ('two')")
            }
            try await document.close()
            #expect(try BundleReader(at: bundle).metadata.store.deflateRestarts == nil, "not a small store")

            let store = try BundleStore(at: bundle, workingDirectory: folder.appending("query"))
            #expect(store.access == .segments, "\(store.reason ?? "")")
            #expect(try store.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM note") } == 2)
            store.close()

            var options = appOptions(folder)
            options.isReadOnly = true
            options.workingDirectory = folder.appending("readers")
            let reader = try await Document.open(at: bundle, options: options)
            #expect(try await reader.reader.read { db in try String.fetchAll(db, sql: "SELECT text FROM note") } == ["one", "two"])
            #expect(!files(below: folder.appending("readers")).contains { $0.hasSuffix("persistentStore") },
                    "a store file was extracted: \(files(below: folder.appending("readers")))")
            try await reader.close()
        }
    }

    @Test("every save of a small document says it is whole because the store is under 1 MiB, the second one too")
    func lastSaveReason() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            let document = try await Document.open(at: bundle, options: appOptions(folder))
            for text in ["one", "two"] {
                try await document.writer.write { db in
                    try db.execute(sql: "CREATE TABLE IF NOT EXISTS note(text TEXT)")
                    try db.execute(sql: "INSERT INTO note VALUES (?)", arguments: [text])
                }
                try await document.save()
                let report = try #require(document.lastSave)
                #expect(report.mode == .full)
                #expect(report.reason?.contains("under 1 MiB") == true, "\(report)")
            }
            try await document.close()
        }
    }
}
