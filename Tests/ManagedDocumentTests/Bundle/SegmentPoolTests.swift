import Foundation
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

/// ``SegmentPool``: one cache of checked segments for the process, shared by every connection to the same bundle
/// file, within a bound per bundle and one for the process. Each test uses a pool of its own, so that the suite's
/// other tests (which read in place through the process's pool) cannot change what it counts.
@Suite("One segment cache for the process: shared by the connections to a bundle, bounded per bundle and in all")
struct SegmentPoolTests {
    /// A deflated bundle of about `bytes` bytes of store in `directory`, its segments 128 KiB.
    private static func bundle(in directory: FilePath, named name: String = "Doc", bytes: Int = 2_400_000,
                               seed: Int = 0) throws -> FilePath {
        let store = try SegmentDigestTests.store(at: directory.appending("\(name).sqlite"), bytes: bytes + seed,
                                                 pageSize: 4096)
        let bundle = directory.appending("\(name).mdz")
        try BundleWriter.write(BundleContent(store: store), metadata: DocumentMetadata(), to: bundle)
        return bundle
    }

    /// A connection's cache over a reader of its own of `bundle`, in `pool`.
    private static func cache(_ bundle: FilePath, cacheSize: Int, pool: SegmentPool) throws -> SegmentCache {
        let reader = try BundleReader(at: bundle)
        guard case .inPlace(let plan) = StoreRoute(reader), !plan.isWhole else {
            throw DocumentError(.invalidArgument, path: bundle, reason: "the fixture is not served segment by segment")
        }
        return SegmentCache(SegmentLoader(reader: reader, plan: plan), cacheSize: cacheSize, pool: pool)
    }

    @Test("ten connections to one bundle, reading every segment at once on ten threads: each segment is loaded once, and each connection gets the bundle's bytes")
    func loadedOnce() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.bundle(in: directory)
            let expected = try Fixtures.bytes(of: directory.appending("Doc.sqlite"))
            let pool = SegmentPool(limit: 64 << 20)
            let caches = try (0..<10).map { _ in try Self.cache(bundle, cacheSize: 64 << 20, pool: pool) }
            let count = caches[0].loader.plan.digests.count
            #expect(count >= 10)
            let mismatches = Protected(0)
            DispatchQueue.concurrentPerform(iterations: caches.count) { connection in
                // > Each thread starts elsewhere, so loads of one segment meet while under way.
                for step in 0..<count {
                    let index = (step + connection * 3) % count
                    let start = index * 131_072
                    let bytes = try? caches[connection].segment(index)
                    if bytes.map({ $0[...] }) != expected[start..<min(expected.count, start + 131_072)] {
                        mismatches.withLock { $0 += 1 }
                    }
                }
            }
            #expect(mismatches.withLock { $0 } == 0)
            let loads = caches.map { $0.statistics.segmentsLoaded }
            #expect(loads.reduce(0, +) == count, "loads by connection: \(loads); \(count) segments")
        }
    }

    @Test("a bundle's segments stay within the largest size its connections asked for, all bundles within the pool's limit, and they go with the bundle's last connection")
    func bounds() async throws {
        try await withTemporaryDirectory { directory in
            let bundles = try (0..<3).map { try Self.bundle(in: directory, named: "Doc\($0)", seed: $0) }
            let pool = SegmentPool(limit: 1 << 20)
            // > Two connections to the first bundle, asking for 256 KiB and 512 KiB: its bound is 512 KiB.
            var caches = try [Self.cache(bundles[0], cacheSize: 256 << 10, pool: pool),
                              Self.cache(bundles[0], cacheSize: 512 << 10, pool: pool),
                              Self.cache(bundles[1], cacheSize: 512 << 10, pool: pool),
                              Self.cache(bundles[2], cacheSize: 512 << 10, pool: pool)]
            for cache in caches {
                for index in 0..<cache.loader.plan.digests.count { _ = try cache.segment(index) }
            }
            #expect(caches[0].statistics.peakBytes <= 512 << 10 && caches[0].statistics.peakBytes >= 384 << 10,
                    "\(caches[0].statistics)")
            #expect(pool.bytes.peak <= 1 << 20 && pool.bytes.now <= 1 << 20, "\(pool.bytes)")
            // > The 512 KiB connection goes: the first bundle's bound falls to 256 KiB at once.
            caches.remove(at: 1)
            #expect(pool.bytes.now <= 1 << 20)
            _ = try caches[0].segment(0)
            // > Every connection goes: nothing is kept.
            caches.removeAll()
            #expect(pool.bytes.now == 0)
            // > A pool limit lowered below what is held drops segments at once.
            let again = try Self.cache(bundles[0], cacheSize: 4 << 20, pool: pool)
            for index in 0..<again.loader.plan.digests.count { _ = try again.segment(index) }
            #expect(pool.bytes.now > 1 << 20, "one bundle's own bound (4 MiB) passes the pool's limit")
            pool.limit = 0
            #expect(pool.bytes.now <= 4 << 20)
            withExtendedLifetime(again) {}
        }
    }

    @Test("a segment is served only to a connection whose metadata records the digest it was checked against, and a replaced bundle file shares nothing with the one it replaced")
    func onlyWhatWasChecked() async throws {
        try await withTemporaryDirectory { directory in
            let pool = SegmentPool(limit: 64 << 20)
            let bundle = try Self.bundle(in: directory)
            let first = try Self.cache(bundle, cacheSize: 8 << 20, pool: pool)
            let key = first.loader.key
            _ = try first.segment(0)
            #expect(pool.holds(0, of: key, digest: first.loader.plan.digests[0]))
            #expect(!pool.holds(0, of: key, digest: String(repeating: "0", count: 64)))
            // > The path now names another bundle (a save renames a new file into place): its connection loads its
            // > own segments, and they hold the new bytes.
            let other = try Self.bundle(in: directory, named: "Other", seed: 5)
            #expect(rename(other.string, bundle.string) == 0)
            let second = try Self.cache(bundle, cacheSize: 8 << 20, pool: pool)
            #expect(second.loader.key != key)
            let bytes = try second.segment(1)
            #expect(second.statistics.segmentsLoaded == 1)
            #expect(bytes[...] == (try Fixtures.bytes(of: directory.appending("Other.sqlite")))[131_072..<262_144])
            withExtendedLifetime(first) {}
        }
    }

    @Test("a damaged segment read by two connections fails both with its error and is never kept")
    func damagedForEveryone() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.bundle(in: directory)
            let reader = try BundleReader(at: bundle)
            let entry = try #require(reader.entry(named: BundleLayout.store))
            let offsets = try #require(reader.metadata.store.deflateRestarts?.offsets)
            var bytes = try Fixtures.bytes(of: bundle)
            bytes[Int(entry.dataOffset) + Int(offsets[2] + offsets[3]) / 2] ^= 0x40
            let damaged = directory.appending("Damaged.mdz")
            try Fixtures.write(bytes, to: damaged)
            let pool = SegmentPool(limit: 64 << 20)
            let caches = try (0..<2).map { _ in try Self.cache(damaged, cacheSize: 8 << 20, pool: pool) }
            for cache in caches {
                let error = try #require(throws: DocumentError.self) { try cache.segment(2) }
                #expect(error.reason.contains("segment 2 "), "\(error)")
            }
            #expect(caches.map { $0.statistics.segmentsLoaded } == [0, 0])
            #expect(!pool.holds(2, of: caches[0].loader.key, digest: caches[0].loader.plan.digests[2]))
            _ = try caches[1].segment(1)
            // > The connections must outlive the count: a bundle's segments go with its last connection.
            withExtendedLifetime(caches) { #expect(pool.bytes.now == 131_072) }
        }
    }
}
