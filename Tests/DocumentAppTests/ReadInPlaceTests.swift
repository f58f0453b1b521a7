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

/// A document of about 2 MiB of text rows (deflated, with segment digests and a restart index).
private func makeDocument(_ bundle: FilePath, folder: FilePath, rows: Int = 1500, tag: String = "a") async throws {
    var options = appOptions(folder)
    options.workingDirectory = folder.appending("writer")
    let document = try await Document.open(at: bundle, options: options)
    try await document.writer.write { db in
        try db.execute(sql: "CREATE TABLE IF NOT EXISTS note(id INTEGER PRIMARY KEY, body TEXT)")
        try db.execute(sql: "DELETE FROM note")
        for index in 0..<rows {
            try db.execute(sql: "INSERT INTO note(id, body) VALUES (?, ?)",
                           arguments: [index, String(repeating: "\(tag) note \(index) ", count: 60)])
        }
    }
    try await document.close()
}

@Suite("Read-only documents read their store in place: nothing extracted, reverts see the bundle as it is now")
struct ReadInPlaceTests {
    @Test("a read-only open extracts nothing, answers like a writable open, and leaves nothing behind")
    func nothingExtracted() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            try await makeDocument(bundle, folder: folder)
            var options = appOptions(folder)
            options.isReadOnly = true
            options.workingDirectory = folder.appending("readers")
            let document = try await Document.open(at: bundle, options: options)
            #expect(document.state == .editingDisabled)
            let inPlace = try await document.reader.read { db in try StoreContent(db) }
            #expect(!files(below: folder.appending("readers")).contains { $0.hasSuffix("persistentStore") },
                    "a store file was extracted: \(files(below: folder.appending("readers")))")
            #expect(inPlace == (try await bundleContent(bundle, folder: folder)))
            let error = await #expect(throws: (any Error).self) {
                try await document.writer.write { db in try db.execute(sql: "DELETE FROM note") }
            }
            #expect(error != nil, "a read-only document refuses writes")
            try await document.close()
            #expect(files(below: folder.appending("readers")).filter { !$0.hasPrefix(".") }.isEmpty,
                    "\(files(below: folder.appending("readers")))")
        }
    }

    @Test("revert reads the bundle as a writer saved it since, through the same reader; a repacked bundle is extracted")
    func revertSeesNewBundle() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            try await makeDocument(bundle, folder: folder, rows: 1500, tag: "a")
            var options = appOptions(folder)
            options.isReadOnly = true
            options.workingDirectory = folder.appending("readers")
            let document = try await Document.open(at: bundle, options: options)
            let reader = try document.reader
            let count = { try await reader.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM note") ?? 0 } }
            let first = { try await reader.read { db in try String.fetchOne(db, sql: "SELECT body FROM note WHERE id = 7") ?? "" } }
            #expect(try await count() == 1500)

            // A writer saves a new version beside the reader: the reader keeps the one it opened.
            try await makeDocument(bundle, folder: folder, rows: 1700, tag: "b")
            #expect(try await count() == 1500)
            #expect(try await first().hasPrefix("a note 7"))
            try await document.revert()
            #expect(try await count() == 1700)
            #expect(try await first().hasPrefix("b note 7"))
            #expect(document.metadata.store.sha256 == (try BundleReader(at: bundle).metadata.store.sha256))

            // Another zip tool repacks it (no restart index any more): the revert extracts it, and reads it.
            try await makeDocument(bundle, folder: folder, rows: 900, tag: "c")
            let unpacked = folder.appending("unpacked")
            #expect(try run("/usr/bin/unzip", ["-q", bundle.string, "-d", unpacked.string]).status == 0)
            let repacked = folder.appending("repacked.mdz")
            let zip = "cd '\(unpacked.string)' && zip -q -X -0 '\(repacked.string)' mimetype && zip -q -X -r -6 '\(repacked.string)' . -x mimetype"
            #expect(try run("/bin/sh", ["-c", zip]).status == 0)
            #expect(rename(repacked.string, bundle.string) == 0)
            try await document.revert()
            // Extracted to be read, and unlinked once open: nothing piles up revert after revert.
            #expect(!files(below: folder.appending("readers")).contains { $0.hasSuffix("persistentStore") },
                    "\(files(below: folder.appending("readers")))")
            #expect(try await count() == 900)
            #expect(try await first().hasPrefix("c note 7"))
            try await document.close()
        }
    }

    @Test("a damaged segment ends the read with an error, never a wrong row, and the document names the segment")
    func damagedSegment() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            try await makeDocument(bundle, folder: folder)
            try flipStoreByte(in: bundle)

            var options = appOptions(folder)
            options.isReadOnly = true
            options.workingDirectory = folder.appending("readers")
            let document = try await Document.open(at: bundle, options: options)  // opens: nothing read yet
            await #expect(throws: (any Error).self) {
                _ = try await document.reader.read { db in
                    try String.fetchAll(db, sql: "SELECT body FROM note ORDER BY id")
                }
            }
            let failure = try #require(document.storeReadFailure)
            #expect(failure.entry == "StoreContent/persistentStore")
            #expect(failure.reason.contains("segment"), "\(failure)")
            try await document.close()
        }
    }

    @Test("reading in place thousands of times holds nothing once each store or document is gone")
    func openedManyTimes() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            try await makeDocument(bundle, folder: folder, rows: 300)
            // A store read in place keeps its bundle open while it lives: what outlived its owner would show here.
            let before = try openDescriptors()
            for _ in 0..<2000 {
                let store = try BundleStore(at: bundle)
                #expect(store.access == .segments)
                _ = try store.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM note") }
                store.close()
            }
            var options = appOptions(folder)
            options.isReadOnly = true
            options.workingDirectory = folder.appending("readers")
            for _ in 0..<100 {
                let document = try await Document.open(at: bundle, options: options)
                _ = try await document.reader.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM note") }
                try await document.close()
            }
            // > Other suites open and close files meanwhile: a margin, far below one descriptor per open.
            let after = try openDescriptors()
            #expect(after < before + 64, "\(before) descriptors open before, \(after) after 2,100 opens")
        }
    }

    @Test("stores reading one bundle share what was inflated: a second store's scan loads nothing while the first is open; once all are gone, a new one loads again")
    func segmentsShared() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            try await makeDocument(bundle, folder: folder, rows: 3000)
            let scan = "SELECT count(*), sum(length(body)) FROM note"
            // > The first store asks for 1 GiB, which lifts the process's bound as long as it is open: nothing its
            // > scan loaded (3 MiB) is dropped before the others run, whatever the suites beside this one read.
            let expected = try { () throws -> Row? in
                let first = try BundleStore(at: bundle, cacheSize: 1 << 30)
                #expect(first.access == .segments, "\(first.reason ?? "")")
                let expected = try first.read { db in try Row.fetchOne(db, sql: scan) }
                #expect(first.cacheStatistics.segmentsLoaded >= 10, "\(first.cacheStatistics)")
                for _ in 0..<3 {
                    let store = try BundleStore(at: bundle)
                    #expect(try store.read { db in try Row.fetchOne(db, sql: scan) } == expected)
                    #expect(store.cacheStatistics.segmentsLoaded == 0, "\(store.cacheStatistics)")
                }
                return expected
            }()
            // > Every store is gone, and its segments with it.
            let later = try BundleStore(at: bundle)
            #expect(try later.read { db in try Row.fetchOne(db, sql: scan) } == expected)
            #expect(later.cacheStatistics.segmentsLoaded > 0, "\(later.cacheStatistics)")
            later.close()
        }
    }
}

/// How many descriptors this process has open.
private func openDescriptors() throws -> Int {
    try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count
}
