// Segment reuse at the writer. Every test here needs the library's internals (`BundleWriter.stage` with a
// `SegmentLoan`, `FileIdentity`, `BundleReader.extractVerifying`), so they stay in this target; the same behaviour
// through the public API (`Document.save`, `lastSave`) is in Tests/DocumentAppTests/Saving/IncrementalSaveTests.swift
// and AutosaveTests.swift.

import Foundation
import GRDB
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

/// Incremental saves (FORMAT.md 16.1) at the writer: a change anywhere is found, only the segments it touches are
/// deflated, and the bundle written holds exactly the new store.
@Suite("Segment reuse: a change in any one segment is found, and only that segment is deflated")
struct SegmentReuseTests {
    /// Writes a bundle of `store` and returns the identity of the file put in place.
    static func save(_ store: FilePath, to bundle: FilePath, reusing: FileIdentity?) throws
    -> (FileIdentity, SaveReport) {
        var options = WritingOptions(compression: .deflate(level: 2))
        options.compressionThreads = 2
        var request = BundleWriter.Request(.file(store, reusing: reusing.flatMap(SegmentLoan.init(written:))),
                                           metadata: DocumentMetadata(), to: bundle, options: options)
        request.replacingExisting = true
        let staged = try BundleWriter.stage(request)
        let identity = try #require(try staged.commit()).identity
        return (identity, staged.report)
    }

    /// The extracted store of `bundle`, every entry and segment checked.
    static func storeBytes(of bundle: FilePath, in directory: FilePath) throws -> [UInt8] {
        let reader = try BundleReader(at: bundle)
        let folder = directory.appending("extracted-\(UUID().uuidString)")
        let extracted = try reader.extract(into: folder, permissions: [.ownerReadWrite], checkingSegments: true)
        defer { try? FileManager.default.removeItem(atPath: folder.string) }  // Squash cleanup error.
        return try Fixtures.bytes(of: extracted.store)
    }

    @Test("one byte changed in the first, a middle or the last (partial) segment: that segment alone is deflated",
          arguments: [(4096, 0), (4096, 5), (4096, -1), (1024, 3), (65_536, -1), (65_536, 0)])
    func singleSegmentChange(pageSize: Int, segment: Int) async throws {
        try await withTemporaryDirectory { directory in
            let store = directory.appending("store.sqlite")
            try Fixtures.makeTextStore(at: store, bytes: 1_500_000, pageSize: pageSize)
            let bundle = directory.appending("Doc.mdz")
            let (identity, first) = try Self.save(store, to: bundle, reusing: nil)
            #expect(first.mode == .full)

            var bytes = try Fixtures.bytes(of: store)
            let interval = 131_072
            let count = (bytes.count + interval - 1) / interval
            let index = segment < 0 ? count - 1 : segment
            let range = (index * interval)..<min(bytes.count, (index + 1) * interval)
            if index == 0 {
                bytes[63] &+= 1  // user_version, on page 1
            } else {
                // A letter of a row's text, in the middle of a run of text (the store stays valid).
                let isText: (UInt8) -> Bool = { (0x61...0x7a).contains($0) || $0 == 0x20 }
                let offset = try #require(stride(from: range.lowerBound + 64, to: range.upperBound - 64, by: 1).first { at in
                    bytes[(at - 32)..<(at + 32)].allSatisfy(isText) && bytes[at] != 0x20
                }, "no text in segment \(index)")
                bytes[offset] = bytes[offset] == 0x61 ? 0x62 : 0x61
            }
            try Fixtures.write(bytes, to: store)

            let (_, report) = try Self.save(store, to: bundle, reusing: identity)
            #expect(report.mode == .incremental, "\(report)")
            #expect(report.segments == count && report.deflatedSegments == 1, "\(report)")
            #expect(try Self.storeBytes(of: bundle, in: directory) == bytes)
            _ = try BundleReader(at: bundle).verify(full: true, workingDirectory: directory)
        }
    }

    @Test("nothing changed: every segment is reused, and the bundle holds the same store")
    func nothingChanged() async throws {
        try await withTemporaryDirectory { directory in
            let store = directory.appending("store.sqlite")
            try Fixtures.makeTextStore(at: store, bytes: 1_200_000, pageSize: 4096)
            let bundle = directory.appending("Doc.mdz")
            let (identity, _) = try Self.save(store, to: bundle, reusing: nil)
            let (_, report) = try Self.save(store, to: bundle, reusing: identity)
            #expect(report.mode == .incremental && report.deflatedSegments == 0, "\(report)")
            #expect(try Self.storeBytes(of: bundle, in: directory) == Fixtures.bytes(of: store))
        }
    }

    @Test("the store grows (the old last segment is deflated again, never reused inside the stream) and shrinks")
    func growAndShrink() async throws {
        try await withTemporaryDirectory { directory in
            let store = directory.appending("store.sqlite")
            try Fixtures.makeTextStore(at: store, bytes: 1_200_000, pageSize: 4096, autoVacuum: true)
            let bundle = directory.appending("Doc.mdz")
            var (identity, _) = try Self.save(store, to: bundle, reusing: nil)
            let queue = try DatabaseQueue(path: store.string)
            let oldCount = (Int(try FileSystem.status(store)!.size) + 131_071) / 131_072

            try queue.write { db in
                for index in 0..<150 {
                    try db.execute(sql: "INSERT INTO note(body) VALUES (?)",
                                   arguments: [String(repeating: "grow \(index) ", count: 80)])
                }
            }
            var report: SaveReport
            (identity, report) = try Self.save(store, to: bundle, reusing: identity)
            #expect(report.mode == .incremental && report.segments > oldCount, "\(report)")
            #expect(try Self.storeBytes(of: bundle, in: directory) == Fixtures.bytes(of: store))

            let grownSize = try FileSystem.status(store)!.size
            try queue.write { db in try db.execute(sql: "DELETE FROM note WHERE id > (SELECT max(id) - 400 FROM note)") }
            try queue.close()
            #expect(try FileSystem.status(store)!.size < grownSize, "auto_vacuum gives the pages back")
            (identity, report) = try Self.save(store, to: bundle, reusing: identity)
            #expect(try Self.storeBytes(of: bundle, in: directory) == Fixtures.bytes(of: store))
            _ = try BundleReader(at: bundle).verify(full: true, workingDirectory: directory)
        }
    }

    @Test("the store's size lands on a segment boundary: the old last segment is never reused inside the new stream, nor an inner one as the new last")
    func lastSegmentOnBoundary() async throws {
        try await withTemporaryDirectory { directory in
            let store = directory.appending("store.sqlite")
            try Fixtures.makeTextStore(at: store, bytes: 1_200_000, pageSize: 4096)
            // > The file cut or extended, and the page count in its header (bytes 28-31) set to match: the schema
            // > stays readable, and the writer sees a store that ends exactly where the test wants.
            var bytes = try Fixtures.bytes(of: store)
            func write() throws {
                let pages = UInt32(bytes.count / 4096)
                for index in 0..<4 { bytes[28 + index] = UInt8(truncatingIfNeeded: pages >> (24 - 8 * index)) }
                try Fixtures.write(bytes, to: store)
            }
            bytes = Array(bytes[..<(bytes.count / 131_072 * 131_072)])
            try write()
            let bundle = directory.appending("Doc.mdz")
            var (identity, _) = try Self.save(store, to: bundle, reusing: nil)

            // Grows past the boundary: the old stream's last segment (which ends the stream) is now inside the new.
            bytes += Array(repeating: 0, count: 8192)
            try write()
            var report: SaveReport
            (identity, report) = try Self.save(store, to: bundle, reusing: identity)
            #expect(report.mode == .incremental && report.deflatedSegments == 3, "page 1, the old last, the new last: \(report)")
            #expect(try Self.storeBytes(of: bundle, in: directory) == bytes)

            // Shrinks onto an earlier boundary: an inner segment of the old stream is now the new one's last.
            bytes = Array(bytes[..<(bytes.count / 131_072 * 131_072 - 131_072)])
            try write()
            (identity, report) = try Self.save(store, to: bundle, reusing: identity)
            #expect(report.mode == .incremental && report.deflatedSegments == 2, "page 1, the new last: \(report)")
            #expect(try Self.storeBytes(of: bundle, in: directory) == bytes)
            try Python.run("import sys, zipfile; sys.exit(1 if zipfile.ZipFile(sys.argv[1]).testzip() else 0)",
                           [bundle.string])
        }
    }

    @Test("a bundle that is not the verified file, or has no segment digests, is saved whole")
    func notReused() async throws {
        try await withTemporaryDirectory { directory in
            let store = directory.appending("store.sqlite")
            try Fixtures.makeTextStore(at: store, bytes: 1_200_000, pageSize: 4096)
            let bundle = directory.appending("Doc.mdz")
            let (identity, _) = try Self.save(store, to: bundle, reusing: nil)

            // The same bytes under another inode: not the file this process verified.
            let copy = directory.appending("copy.mdz")
            try FileManager.default.copyItem(atPath: bundle.string, toPath: copy.string)
            #expect(rename(copy.string, bundle.string) == 0)
            var (newIdentity, report) = try Self.save(store, to: bundle, reusing: identity)
            #expect(report.mode == .full && report.reason?.contains("not the one") == true, "\(report)")

            _ = newIdentity
            #expect(try Self.storeBytes(of: bundle, in: directory) == Fixtures.bytes(of: store))

            // An older writer's bundle: no restart index, no segment digests.
            let parts = try ZipSurgery.makeParts(in: directory, rows: 2000)
            let older = directory.appending("Older.mdz")
            try ZipSurgery.writeBundle(at: older, parts: parts)
            let descriptor = try FileSystem.openForReading(older)
            defer { try? descriptor.close() }  // Squash close error of a read-only descriptor.
            let olderStore = directory.appending("older.sqlite")
            try Fixtures.write(parts.store, to: olderStore)
            (_, report) = try Self.save(olderStore, to: older, reusing: FileIdentity(descriptor))
            // > Its store is under 1 MiB: that reason comes first (no store that small has segments to reuse).
            #expect(report.mode == .full && report.reason?.contains("older writer") == true
                    || report.reason?.contains("restart index") == true
                    || report.reason?.contains("under 1 MiB") == true, "\(report)")
            #expect(try Self.storeBytes(of: older, in: directory) == parts.store)
        }
    }

    @Test("the unchanged-bundle proof starts before the first read: a change between open and extraction is never trusted")
    func identityFromBeforeTheFirstRead() async throws {
        try await withTemporaryDirectory { directory in
            let store = directory.appending("store.sqlite")
            try Fixtures.makeTextStore(at: store, bytes: 1_200_000, pageSize: 4096)
            let bundle = directory.appending("Doc.mdz")
            _ = try Self.save(store, to: bundle, reusing: nil)

            // Untouched: the extraction proves the file it read, and names it.
            let reader = try BundleReader(at: bundle)
            let (_, verified) = try reader.extractVerifying(into: directory.appending("a"), forReuse: true)
            #expect(verified?.identity == reader.openedIdentity)

            // Written to (the same bytes, in place) after the reader opened it and before it is extracted: the file
            // may hold other bytes than the ones checked, so the extraction vouches for nothing.
            let changed = try BundleReader(at: bundle)
            let bytes = try Fixtures.bytes(of: bundle)
            let handle = try #require(FileHandle(forWritingAtPath: bundle.string))
            try handle.write(contentsOf: Data(bytes))
            try handle.close()
            let (_, unproven) = try changed.extractVerifying(into: directory.appending("b"), forReuse: true)
            #expect(unproven == nil)
        }
    }

    @Test("an identity without nanoseconds (a file system of whole seconds) proves nothing: the save is full")
    func coarseTimesProveNothing() async throws {
        try await withTemporaryDirectory { directory in
            let store = directory.appending("store.sqlite")
            try Fixtures.makeTextStore(at: store, bytes: 1_200_000, pageSize: 4096)
            let bundle = directory.appending("Doc.mdz")
            var (identity, _) = try Self.save(store, to: bundle, reusing: nil)
            #expect(identity.hasFineTimes)
            identity.modified.tv_nsec = 0
            identity.changed.tv_nsec = 0
            let (_, report) = try Self.save(store, to: bundle, reusing: identity)
            #expect(report.mode == .full && report.reason?.contains("whole-second") == true, "\(report)")
        }
    }
}
