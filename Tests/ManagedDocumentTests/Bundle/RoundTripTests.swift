import Foundation
import GRDB
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

@Suite("Bundles round-trip their content exactly")
struct RoundTripTests {
    @Test("a store with thousands of rows of text, NULLs and blobs comes back identical", arguments: [
        WritingOptions.Compression.deflate(level: 6), .deflate(level: 1), .store,
    ])
    func storeRoundTrip(compression: WritingOptions.Compression) async throws {
        try await withTemporaryDirectory { directory in
            let store = try Fixtures.makeStore(at: directory.appending("source.sqlite"), rows: 3_000)
            let expected = try Fixtures.rowDigests(of: store)
            let bundle = directory.appending("Notes.mdz")
            let written = try BundleWriter.write(BundleContent(store: store), metadata: DocumentMetadata(),
                                                 to: bundle, options: WritingOptions(compression: compression))
            let reader = try BundleReader(at: bundle)
            #expect(reader.metadata == written)
            #expect(reader.metadata.store.userVersion == 7)
            #expect(reader.storeEntry.isCompressed == (compression != .store))
            let extracted = try reader.extract(into: directory.appending("out"))
            #expect(try Fixtures.rowDigests(of: extracted.store) == expected)
            #expect(try Fixtures.bytes(of: extracted.store) == Fixtures.bytes(of: store))
            let report = try reader.verify(full: true)
            #expect(report.rowCounts["note"] == 3_000)
        }
    }

    @Test("external data and additional content are packed byte for byte")
    func foldersRoundTrip() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = directory.appending("Diary.mdz")
            let metadata = try Fixtures.makeBundle(at: bundle, rows: 20, withFolders: true)
            #expect(metadata.entries.count == 5)
            #expect(metadata.entries.map(\.name) == metadata.entries.map(\.name).sorted())
            let reader = try BundleReader(at: bundle)
            let extracted = try reader.extract(into: directory.appending("out"))
            let externalData = try #require(extracted.externalData)
            #expect(try FileSystem.contentsOfDirectory(externalData).count == 3)
            for entry in metadata.entries {
                let file = extracted.directory.appending(entry.name)
                let digest = try FileDigest(of: file)
                #expect(digest.sha256 == entry.sha256)
                #expect(digest.size == entry.size)
            }
            #expect(try Fixtures.bytes(of: extracted.directory.appending("AdditionalContent/readme.txt"))
                    == Array("hello".utf8))
        }
    }

    @Test("extracting the store gives a loose store with its external data beside it, as Core Data lays it out")
    func extractStore() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = directory.appending("Diary.mdz")
            try Fixtures.makeBundle(at: bundle, rows: 20, withFolders: true)
            let reader = try BundleReader(at: bundle)
            let placed = try reader.extractStore(to: directory.appending("Diary.sqlite"))
            #expect(placed.externalData == directory.appending(".Diary_SUPPORT/_EXTERNAL_DATA"))
            #expect(try FileSystem.contentsOfDirectory(directory.appending(".Diary_SUPPORT/_EXTERNAL_DATA")).count == 3)
            #expect(try Fixtures.rowDigests(of: placed.store)["note"]?.hasPrefix("20:") == true)
            let again = #expect(throws: DocumentError.self) { try reader.extractStore(to: placed.store) }
            #expect(again?.code == .alreadyExists)
            // Nothing but the bundle, the store and its support folder: the working folder is gone.
            #expect(try FileSystem.contentsOfDirectory(directory) == [".Diary_SUPPORT", "Diary.mdz", "Diary.sqlite"])
        }
    }

    @Test("metadata survives a round trip, unknown keys are ignored, and dates keep their second")
    func metadataRoundTrip() async throws {
        var metadata = DocumentMetadata(model: .init(name: "Taste", version: "2", compatibilityLevel: 3))
        metadata.userInfo = ["color": .string("red"), "n": .number(3), "flags": .array([.bool(true), .null])]
        metadata.formatVersion = 2  // its segment digests in the metadata (version 3: below)
        metadata.store.digest = String(repeating: "a", count: 64)
        metadata.store.segments = .init(interval: 131_072, digests: [String(repeating: "b", count: 64)])
        var bytes = try metadata.encoded()
        let decoded = try DocumentMetadata.decode(bytes, bundle: nil)
        #expect(decoded.userInfo == metadata.userInfo)
        #expect(decoded.model == metadata.model)
        #expect(abs(decoded.createdAt.timeIntervalSince(metadata.createdAt)) < 0.001)
        // A key from the future is ignored.
        bytes.removeLast()  // the closing brace
        bytes += Array(",\"futureKey\":{\"x\":1}}".utf8)
        #expect(try DocumentMetadata.decode(bytes, bundle: nil).documentID == metadata.documentID)

        // Version 3 (FORMAT.md 13.2): the index reference survives; segment records in the text are not read (the
        // reader fills them from the store index).
        metadata.formatVersion = 3
        metadata.store.index = .init(entry: BundleLayout.storeIndex, root: String(repeating: "c", count: 64),
                                     interval: 131_072, compressedSize: 10, crc32: 7)
        metadata.store.deflateRestarts = .init(interval: 131_072, offsets: [0])
        let third = try DocumentMetadata.decode(try metadata.encoded(), bundle: nil)
        #expect(third.store.index == metadata.store.index)
        #expect(third.store.segments == nil && third.store.deflateRestarts == nil)
        metadata.store.index = nil
        let missing = #expect(throws: DocumentError.self) { try DocumentMetadata.decode(try metadata.encoded(), bundle: nil) }
        #expect(missing?.code == .invalidMetadata && missing?.reason.contains("store.index") == true)
    }

    @Test("a new empty document verifies and holds an empty SQLite store")
    func emptyDocument() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = directory.appending("New.mdz")
            let metadata = try BundleWriter.createEmptyDocument(at: bundle)
            #expect(metadata.store.size > 0)
            let report = try BundleReader(at: bundle).verify(full: true)
            #expect(report.rowCounts.isEmpty)
            let error = #expect(throws: DocumentError.self) { try BundleWriter.createEmptyDocument(at: bundle) }
            #expect(error?.code == .alreadyExists)
            #expect(try FileSystem.contentsOfDirectory(directory) == ["New.mdz"])
        }
    }

    @Test("a document made from a WAL store includes the rows that live only in the -wal")
    func createFromWALStore() async throws {
        try await withTemporaryDirectory { directory in
            let source = directory.appending("live.sqlite")
            try Fixtures.makeStore(at: source, rows: 10)
            // Keep a connection open so the last transactions stay in the -wal, then copy the three files.
            let queue = try DatabaseQueueForTests.walQueue(at: source)
            try queue.write { db in
                for index in 0..<500 {
                    try db.execute(sql: "INSERT INTO note(title) VALUES (?)", arguments: ["wal \(index)"])
                }
            }
            let copy = directory.appending("copy")
            try FileManager.default.createDirectory(atPath: copy.string, withIntermediateDirectories: true)
            for suffix in ["", "-wal", "-shm"] {
                try FileManager.default.copyItem(atPath: source.string + suffix,
                                                 toPath: copy.appending("live.sqlite" + suffix).string)
            }
            try queue.close()
            let walBytes = try FileSystem.status(copy.appending("live.sqlite-wal"))?.size ?? 0
            #expect(walBytes > 0)
            let bundle = directory.appending("Live.mdz")
            try BundleWriter.createDocument(at: bundle, copyingStore: copy.appending("live.sqlite"))
            let report = try BundleReader(at: bundle).verify(full: true)
            #expect(report.rowCounts["note"] == 510)
        }
    }

    @Test("dates are written in UTC with milliseconds, and read in the other ISO 8601 forms writers use")
    func iso8601Dates() {
        let date = Date(timeIntervalSince1970: 1_700_000_000.5)
        #expect(ISO8601.format(date) == "2023-11-14T22:13:20.500Z")
        #expect(ISO8601.format(Date(timeIntervalSince1970: 0)) == "1970-01-01T00:00:00.000Z")
        #expect(ISO8601.format(Date(timeIntervalSince1970: 951_782_400)) == "2000-02-29T00:00:00.000Z")
        #expect(ISO8601.parse("2023-11-14T22:13:20.500Z") == date)
        #expect(ISO8601.parse(ISO8601.format(date)) == date)
        #expect(ISO8601.parse("2023-11-14T22:13:20Z") == Date(timeIntervalSince1970: 1_700_000_000))
        #expect(ISO8601.parse("2023-11-14T22:13:20.5Z") == date)
        #expect(ISO8601.parse("2023-11-14T23:13:20+01:00") == Date(timeIntervalSince1970: 1_700_000_000),
                "an offset instead of Z")
        #expect(ISO8601.parse("2000-02-29T00:00:00Z") == Date(timeIntervalSince1970: 951_782_400))
        for text in ["", "yesterday", "2023-11-14", "2023-13-01T00:00:00Z", "2023-02-29T00:00:00Z",
                     "2023-11-14T24:00:00Z", "2023-11-14T22:61:00Z", "2023-11-14T22:13:20.Z", "2023-11-14T22:13:2xZ"] {
            #expect(ISO8601.parse(text) == nil, "\(text) is not a date")
        }
        #expect(ISO8601.format(Date(timeIntervalSince1970: -0.25)) == "1969-12-31T23:59:59.750Z")
        #expect(ISO8601.format(Date(timeIntervalSince1970: 1_700_000_000.9996)) == "2023-11-14T22:13:21.000Z")
        // Every millisecond survives a round trip unchanged, however the fraction falls in binary.
        var drifted: [String] = []
        for base in ["2023-11-14T22:13:20", "2026-11-23T09:59:59", "1969-12-31T23:59:59"] {
            for millisecond in 0..<1000 {
                let digits = String(millisecond)
                let text = base + "." + String(repeating: "0", count: 3 - digits.count) + digits + "Z"
                guard let parsed = ISO8601.parse(text) else { drifted.append(text + " (unread)"); continue }
                if ISO8601.format(parsed) != text { drifted.append(text + " → " + ISO8601.format(parsed)) }
            }
        }
        #expect(drifted.isEmpty, "\(drifted.prefix(5))")

        // Found by fuzzing (Fuzz/Corpus/metadata): Foundation forgave trailing bytes, and a date read in another
        // form came back a hair different once written and read again.
        #expect(ISO8601.parse("2026-11-24T19:22:25.62Z8") == nil)
        #expect(ISO8601.parse("2026-11-24T20:22:25.62+01:00Z") == nil)
        for text in ["2026-11-24T20:22:25.62+01:00", "2026-11-24T19:22:25.6204Z", "2026-11-24T19:22:25.123456789Z",
                     "1969-12-31T23:59:59.9999Z"] {
            guard let once = ISO8601.parse(text) else {
                Issue.record("\(text) is a date")
                continue
            }
            #expect(ISO8601.parse(ISO8601.format(once)) == once, "\(text) read, written and read again")
        }
    }
}
