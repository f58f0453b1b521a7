import Foundation
import GRDB
import ManagedDocument
import SystemPackage
import TestSupport
import Testing

/// Values an app can build that the library cannot follow: refused with one error type, ``DocumentError``, code
/// `invalidArgument`, before anything is written; never a trap.
@Suite("Out-of-range arguments are refused with DocumentError, not a crash")
struct ArgumentTests {
    @Test("a deflate level outside 1-9 is refused before anything is written", arguments: [0, -1, 10, 12, Int.max])
    func deflateLevel(level: Int) async throws {
        try await withTemporaryDirectory { folder in
            let store = folder.appending("store.sqlite")
            let queue = try DatabaseQueue(path: store.string)
            try await queue.write { db in try db.execute(sql: "CREATE TABLE note(text); INSERT INTO note VALUES ('kept')") }
            try queue.close()
            let target = folder.appending("Notes.mdz")
            let options = WritingOptions(compression: .deflate(level: level))
            let error = #expect(throws: DocumentError.self) {
                try BundleWriter.write(BundleContent(store: store), metadata: DocumentMetadata(), to: target, options: options)
            }
            #expect(error?.code == .invalidArgument)
            #expect(error?.reason.contains("deflate level \(level)") == true, "\(String(describing: error))")
            #expect(try FileManager.default.contentsOfDirectory(atPath: folder.string) == ["store.sqlite"],
                    "nothing is written, not even a temporary")
            // The same level for a document's saves: creating it is refused, and nothing is left behind.
            var open = appOptions(folder)
            open.createIfMissing = true
            open.saving.compression = .deflate(level: level)
            let openError = await #expect(throws: DocumentError.self) {
                try await Document.open(at: folder.appending("Doc.mdz"), options: open)
            }
            #expect(openError?.code == .invalidArgument)
            #expect(!FileManager.default.fileExists(atPath: folder.appending("Doc.mdz").string))
            // An existing document opened with saving options no save can follow is refused at open (every option
            // is checked there), and its bundle is left as it was.
            open.saving.compression = .deflate
            let document = try await Document.open(at: folder.appending("Doc.mdz"), options: open)
            try await document.writer.write { db in try db.execute(sql: "CREATE TABLE t(x)") }
            try await document.save()
            let saved = try Data(contentsOf: URL(fileURLWithPath: folder.appending("Doc.mdz").string))
            try await document.close()
            open.saving.compression = .deflate(level: level)
            open.createIfMissing = false
            let reopenError = await #expect(throws: DocumentError.self) {
                try await Document.open(at: folder.appending("Doc.mdz"), options: open)
            }
            #expect(reopenError?.code == .invalidArgument)
            #expect(try Data(contentsOf: URL(fileURLWithPath: folder.appending("Doc.mdz").string)) == saved)
        }
    }

    @Test("a shard out of range is a DocumentError naming the value")
    func shards() throws {
        for text in ["4/4", "-1/2", "1/0", "x"] {
            let error = #expect(throws: DocumentError.self) { try BatchShard(parsing: text) }
            #expect(error?.code == .invalidArgument, "\(text)")
        }
        let error = #expect(throws: DocumentError.self) { try BatchShard(index: 5, count: 4) }
        #expect(error?.reason.contains("5 of 4") == true)
    }
}

@Suite("Finding documents under a folder")
struct FindingDocumentsTests {
    @Test("bundles are found by content, sorted, hidden folders included (as a batch walks); links, temporaries and other files are not")
    func bundlesUnderAFolder() async throws {
        try await withTemporaryDirectory { folder in
            let root = folder.appending("docs")
            for relative in ["b/Second.mdz", "a/First.mdz", "a/deeper/Named.anything", ".hidden/Secret.mdz"] {
                let path = root.appending(relative)
                try FileManager.default.createDirectory(atPath: path.removingLastComponent().string,
                                                        withIntermediateDirectories: true)
                var open = appOptions(folder)
                open.createIfMissing = true
                let document = try await Document.open(at: path, options: open)
                try await document.close()
            }
            try Data("not a bundle".utf8).write(to: URL(fileURLWithPath: root.appending("a/notes.mdz").string))
            // > A write in progress (a temporary beside its target) is the library's own file, not a document.
            try FileManager.default.copyItem(atPath: root.appending("a/First.mdz").string,
                                             toPath: root.appending("a/.First.mdz.1234.partial").string)
            try FileManager.default.createSymbolicLink(atPath: root.appending("link.mdz").string,
                                                       withDestinationPath: root.appending("a/First.mdz").string)
            let found = try Document.bundles(under: root).map(\.string)
            #expect(found == [".hidden/Secret.mdz", "a/First.mdz", "a/deeper/Named.anything", "b/Second.mdz"]
                .map { root.appending($0).string })
            #expect(try Document.bundles(under: root.appending("b/Second.mdz")) == [root.appending("b/Second.mdz")])
            let error = #expect(throws: DocumentError.self) { try Document.bundles(under: root.appending("a/notes.mdz")) }
            #expect(error?.code == .notAZipArchive || error?.code == .notADocument, "\(String(describing: error))")
        }
    }
}
