import Foundation
import GRDB
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

/// ``BundleStore``: the store read in place through the bundle VFS, each segment checked; extracted only when the
/// bundle does not allow it.
@Suite("Queries on a bundle's store without extracting it: pages served from the bundle, every segment checked")
struct BundleStoreTests {
    /// Per-table digests of every row, through any connection.
    static func digests(_ read: ((Database) throws -> [String: String]) throws -> [String: String]) throws
        -> [String: String] {
        try read { db in
            var result: [String: String] = [:]
            let tables = try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            for table in tables {
                var hasher = [UInt8]()
                let rows = try Row.fetchCursor(db, sql: "SELECT * FROM \"\(table)\" ORDER BY rowid")
                while let row = try rows.next() { hasher += Array(row.description.utf8) }
                result[table] = ZipSurgery.sha256(hasher)
            }
            return result
        }
    }

    static func bundle(in directory: FilePath, pageSize: Int, bytes: Int, level: Int) throws -> (FilePath, FilePath) {
        let store = try SegmentDigestTests.store(at: directory.appending("store-\(pageSize)-\(level).sqlite"),
                                                 bytes: bytes, pageSize: pageSize)
        var options = WritingOptions()
        options.compression = level == 0 ? .store : .deflate(level: level)
        let bundle = directory.appending("Doc-\(pageSize)-\(level).mdz")
        try BundleWriter.write(BundleContent(store: store), metadata: DocumentMetadata(), to: bundle, options: options)
        return (bundle, store)
    }

    @Test("every row reads the same as from the loose store: stored and deflated, page sizes 1 KiB to 64 KiB",
          arguments: [(1024, 0), (4096, 2), (16_384, 6), (65_536, 2), (65_536, 0)])
    func sameRows(pageSize: Int, level: Int) async throws {
        try await withTemporaryDirectory { directory in
            let (bundle, loose) = try Self.bundle(in: directory, pageSize: pageSize, bytes: 1_600_000, level: level)
            let store = try BundleStore(at: bundle, cacheSize: 256 << 10)
            defer { store.close() }
            #expect(store.access == .segments, "\(store.reason ?? "")")
            let queue = try DatabaseQueue(path: loose.string)
            let expected = try Self.digests { try queue.read($0) }
            #expect(try Self.digests { try store.read($0) } == expected)
            #expect(try store.read { try Int.fetchOne($0, sql: "PRAGMA page_size") } == pageSize)
            // > The cache stays within its bound (two segments at least) while the scan reads the whole store.
            let stats = store.cacheStatistics
            #expect(stats.peakBytes <= max(256 << 10, 2 * 131_072), "\(stats)")
            let segments = store.metadata.store.segments?.count ?? 0
            #expect(stats.segmentsLoaded >= segments * 3 / 4 && segments >= 10, "\(stats), \(segments) segments")
            // > A sort larger than SQLite's page cache spills to a temporary file (the default VFS serves it).
            let sorted = "SELECT count(*) FROM (SELECT payload FROM blob ORDER BY text DESC, payload)"
            let spilled = try store.read { db -> Int? in
                try db.execute(sql: "PRAGMA cache_size = 8")
                return try Int.fetchOne(db, sql: sorted)
            }
            #expect(try spilled == queue.read { try Int.fetchOne($0, sql: sorted) })
            // > Writes are refused: the connection is read-only.
            #expect(throws: (any Error).self) { try store.read { try $0.execute(sql: "DELETE FROM blob") } }
        }
    }

    @Test("a flipped byte in any segment of the store gives the specific error, never a result",
          arguments: [0, 2])
    func flippedByte(level: Int) async throws {
        try await withTemporaryDirectory { directory in
            // > Over 1 MiB: a deflated store that large has restart points (a smaller one is extracted instead).
            let (bundle, _) = try Self.bundle(in: directory, pageSize: 4096, bytes: 1_400_000, level: level)
            let reader = try BundleReader(at: bundle)
            let entry = try #require(reader.entry(named: BundleLayout.store))
            let segments = try #require(reader.metadata.store.segments).count
            let compressedOffsets = reader.metadata.store.deflateRestarts?.offsets
            let original = try Fixtures.bytes(of: bundle)
            // > The first segment, one in the middle, the last (partial) one; in its compressed bytes when deflated.
            for index in [0, segments / 2, segments - 1] {
                let start = Int64(index) * 131_072
                let within: Int64
                if let offsets = compressedOffsets {
                    let end = index + 1 < offsets.count ? offsets[index + 1] : Int64(entry.compressedSize)
                    within = offsets[index] + (end - offsets[index]) / 2
                } else {
                    within = start + 777
                }
                var damaged = original
                damaged[Int(entry.dataOffset) + Int(within)] ^= 0x10
                let copy = directory.appending("Damaged-\(level)-\(index).mdz")
                try Fixtures.write(damaged, to: copy)
                // > Opening reads page 1 (segment 0): its damage is found there; any other, by the scan.
                let error = try #require(throws: DocumentError.self, "segment \(index)") {
                    let store = try BundleStore(at: copy)
                    defer { store.close() }
                    #expect(store.access == .segments)
                    _ = try Self.digests { try store.read($0) }
                }
                #expect([.checksumMismatch, .corruptArchive, .sizeMismatch].contains(error.code), "\(error)")
                #expect(error.entry == BundleLayout.store && error.reason.contains("segment \(index) "), "\(error)")
                #expect(error.path == copy)
            }
        }
    }

    @Test("digests that cover several restart segments (a large store's): the rows read the same, damage is found",
          arguments: [0, 2])
    func coarseDigests(level: Int) async throws {
        try await withTemporaryDirectory { directory in
            let loose = try SegmentDigestTests.store(at: directory.appending("store.sqlite"), bytes: 1_600_000,
                                                     pageSize: 4096)
            var options = WritingOptions()
            options.compression = level == 0 ? .store : .deflate(level: level)
            options.maximumSegmentDigests = 4
            options.formatVersion = 2  // version 3 records one digest a restart segment, at any size
            let bundle = directory.appending("Coarse.mdz")
            let metadata = try BundleWriter.write(BundleContent(store: loose), metadata: DocumentMetadata(), to: bundle,
                                                  options: options)
            let segments = try #require(metadata.store.segments)
            #expect(segments.interval == 512 << 10 && (3...4).contains(segments.count), "\(segments.interval) × \(segments.count)")
            #expect(segments.digests == SegmentDigestTests.digests(of: try Fixtures.bytes(of: loose), interval: 512 << 10))
            let store = try BundleStore(at: bundle, cacheSize: 1 << 20)
            #expect(store.access == .segments, "\(store.reason ?? "")")
            let queue = try DatabaseQueue(path: loose.string)
            #expect(try Self.digests { try store.read($0) } == Self.digests { try queue.read($0) })
            store.close()
            _ = try BundleReader(at: bundle).verify(full: false, workingDirectory: directory)

            // > A byte of the third digest's segment (its second restart segment when deflated), flipped.
            let reader = try BundleReader(at: bundle)
            let entry = try #require(reader.entry(named: BundleLayout.store))
            let offset: Int64 = metadata.store.deflateRestarts.map { $0.offsets[9] + 10 } ?? (2 * 512 << 10) + 300_000
            var bytes = try Fixtures.bytes(of: bundle)
            bytes[Int(entry.dataOffset) + Int(offset)] ^= 0x08
            let damaged = directory.appending("Damaged.mdz")
            try Fixtures.write(bytes, to: damaged)
            let error = try #require(throws: DocumentError.self) {
                let store = try BundleStore(at: damaged)
                defer { store.close() }
                _ = try Self.digests { try store.read($0) }
            }
            #expect(error.reason.contains("segment 2 "), "\(error)")
        }
    }

    @Test("a bundle replaced on disk while its store is open: the reader keeps reading the file it opened")
    func replacedWhileOpen() async throws {
        try await withTemporaryDirectory { directory in
            let (bundle, _) = try Self.bundle(in: directory, pageSize: 4096, bytes: 600_000, level: 2)
            let store = try BundleStore(at: bundle, cacheSize: 128 << 10)
            defer { store.close() }
            let before = try Self.digests { try store.read($0) }
            let other = directory.appending("Other.mdz")
            try Fixtures.makeBundle(at: other, rows: 10)
            try FileSystem.rename(other, to: bundle)
            #expect(try Self.digests { try store.read($0) } == before)
        }
    }

    @Test("a bundle without segment digests is served whole from memory when small, extracted (saying why) when not")
    func fallback() async throws {
        try await withTemporaryDirectory { directory in
            let parts = try ZipSurgery.makeParts(in: directory, rows: 300).asVersion1(keepingSegments: false)
            let older = directory.appending("Older.mdz")
            try ZipSurgery.writeBundle(at: older, parts: parts)
            let whole = try BundleStore(at: older, workingDirectory: directory)
            #expect(whole.access == .segments, "\(whole.reason ?? "")")
            #expect(try whole.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM note") } == 300)
            whole.close()
            #expect(try FileSystem.contentsOfDirectory(directory).filter { $0.hasPrefix(".query-") }.isEmpty)

            var limits = ReadingLimits()
            limits.maxRestartSegmentSize = UInt64(parts.store.count - 1)
            let store = try BundleStore(at: older, limits: limits, workingDirectory: directory)
            #expect(store.access == .extracted)
            #expect(store.reason?.contains("segment digests") == true, "\(store.reason ?? "")")
            #expect(try store.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM note") } == 300)
            store.close()
            let left = try FileSystem.contentsOfDirectory(directory).filter { $0.hasPrefix(".query-") }
            #expect(left.isEmpty, "the extracted copy is removed: \(left)")
        }
    }

    @Test("a small store (no restart index) is served whole: a flipped byte anywhere fails the read, never a wrong row",
          arguments: [0.1, 0.5, 0.9])
    func smallStoreWhole(position: Double) async throws {
        try await withTemporaryDirectory { directory in
            let (bundle, _) = try Self.bundle(in: directory, pageSize: 4096, bytes: 300_000, level: 2)
            let reader = try BundleReader(at: bundle)
            #expect(reader.metadata.store.deflateRestarts == nil)
            let store = try BundleStore(at: bundle)
            #expect(store.access == .segments, "\(store.reason ?? "")")
            let good = try Self.digests { try store.read($0) }
            store.close()
            // One byte of the deflated stream flipped: the segment digests (format version 2) refuse what it
            // inflates to, naming the segment.
            let entry = try #require(reader.entry(named: "StoreContent/persistentStore"))
            var bytes = try Fixtures.bytes(of: bundle)
            bytes[Int(entry.dataOffset) + Int(Double(entry.compressedSize) * position)] ^= 0x40
            let damaged = directory.appending("Damaged.mdz")
            try Fixtures.write(bytes, to: damaged)
            let error = #expect(throws: DocumentError.self) {
                let broken = try BundleStore(at: damaged)
                defer { broken.close() }
                _ = try Self.digests { try broken.read($0) }
            }
            // > Named where its digests are kept: the store index of format version 3 (FORMAT.md 13.2).
            #expect(error?.reason.contains("the store index ('StoreContent/persistentStore.index')") == true
                    && error?.reason.contains("segment ") == true, "\(String(describing: error))")
            #expect(!good.isEmpty)
        }
    }
}
