// Hostile bundles, docs/FORMAT.md section 9, "The store".
// The store's bytes checked while inflating (CRC-32, SHA-256: 15.6; an additional file's SHA-256, section 10,
// the same way) and when it is verified with SQLite (15.7).

import Foundation
import GRDB
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

extension HostileBundleTests {
    @Test("a flipped byte in a stored store entry fails its CRC-32", arguments: [RefusalStep.extract, .verify])
    func storeCRCMismatch(step: RefusalStep) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory, options: WritingOptions(compression: .store))
            try ZipSurgery.edit(bundle) {
                $0.modify(BundleLayout.store) { entry in
                    #expect(entry.record.method == 0)
                    entry.payload[Int(entry.record.uncompressedSize) / 2] ^= 0x5A
                }
            }
            #expect(throws: Never.self) { try BundleReader(at: bundle) }
            try expectRefusal(bundle, in: directory, at: step, code: .checksumMismatch, entry: BundleLayout.store)
        }
    }

    @Test("a version 1 store whose SHA-256 differs from the metadata's is refused",
          arguments: [RefusalStep.extract, .verify])
    func storeSHA256Mismatch(step: RefusalStep) async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.metadata.formatVersion = 1
            parts.metadata.store.digest = nil
            parts.metadata.store.sha256 = ZipSurgery.sha256(Array("something else".utf8))
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, at: step, code: .checksumMismatch, entry: BundleLayout.store)
        }
    }

    @Test("a version 2 store whose segment differs from its digest is refused, naming the segment (13.1)",
          arguments: [RefusalStep.extract, .verify])
    func storeSegmentMismatch(step: RefusalStep) async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory, rows: 400)
            var digests = try #require(parts.metadata.store.segments).digests
            try #require(digests.count >= 2)
            digests[1] = ZipSurgery.sha256(Array("something else".utf8))
            parts.metadata.store.segments?.sha256 = digests.joined()
            parts.reseal()  // the store digest names the lying segments: only the content check can find them
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            let error = try expectRefusal(bundle, in: directory, at: step, code: .checksumMismatch,
                                          entry: BundleLayout.store)
            #expect(error?.reason.contains("segment 1") == true, "\(String(describing: error))")
        }
    }

    @Test("an additional file whose SHA-256 differs from the metadata's is refused")
    func entrySHA256Mismatch() async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.add(Self.readme, Array("hello".utf8))
            parts.metadata.entries[0].sha256 = ZipSurgery.sha256(Array("jello".utf8))
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, at: .extract, code: .checksumMismatch, entry: Self.readme)
        }
    }

    @Test("a store that is not a SQLite database is refused", arguments: [RefusalStep.extract, .verify])
    func storeNotSQLite(step: RefusalStep) async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.replaceStore(Array(String(repeating: "this is not a database. ", count: 400).utf8))
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, at: step, code: .notSQLite, entry: BundleLayout.store)
        }
    }

    @Test("a store with a good header and garbage pages fails SQLite's quick_check")
    func storeCorrupt() async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory, rows: 200)
            var store = parts.store
            let pageSize = parts.metadata.store.pageSize
            #expect(store.count >= 4 * pageSize)
            var generator = SeededGenerator(seed: 42)
            for index in pageSize..<store.count { store[index] = UInt8.random(in: 0...255, using: &generator) }
            parts.replaceStore(store)
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, at: .verify, code: .storeCorrupt, entry: BundleLayout.store)
        }
    }

    @Test("a store in WAL mode at rest is refused")
    func storeInWALMode() async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            var store = parts.store
            store[18] = 2
            store[19] = 2
            parts.replaceStore(store)
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, at: .verify, code: .storeInWALMode, entry: BundleLayout.store)
        }
    }
}

extension HostileBundleTests {
    /// How a store's header is made to contradict its metadata.
    enum HeaderLie: String, CaseIterable, Sendable {
        case pageSize, userVersion, walMode
    }

    @Test("a store whose header contradicts the metadata (page size, user_version) or says WAL is refused at open by every in-place reader: BundleStore and the extension", arguments: HeaderLie.allCases)
    func headerContradictsMetadata(lie: HeaderLie) async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory, rows: 400)
            switch lie {
            case .pageSize: parts.metadata.store.pageSize *= 2
            case .userVersion: parts.metadata.store.userVersion += 7
            case .walMode:
                var store = parts.store
                store[18] = 2
                store[19] = 2
                parts.replaceStore(store)
            }
            parts.reseal()
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            let expected: DocumentError.Code = lie == .walMode ? .storeInWALMode : .metadataMismatch
            let error = #expect(throws: DocumentError.self) {
                let store = try BundleStore(at: bundle)
                defer { store.close() }
                _ = try store.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_schema") }
            }
            #expect(error?.code == expected, "\(String(describing: error))")
            // > `verify` refuses it too (it reads the whole store with SQLite).
            try expectRefusal(bundle, in: directory, at: .verify, code: expected, entry: BundleLayout.store)

            try #require(SQLiteHosts.unavailable == nil, "\(SQLiteHosts.unavailable ?? "")")
            let served = try SQLiteHosts.runPython(SQLiteHosts.tableDigests, ["mdz:" + bundle.string],
                                                   environment: ProcessInfo.processInfo.environment.merging(["MDZVFS_LOG": "stderr"]) { $1 })
            #expect(served.status != 0, "the extension served a store whose header contradicts its metadata: \(served.stdout)")
            #expect(served.stderr.contains(lie == .walMode ? "WAL" : "the metadata says"), "\(served.stderr)")
        }
    }
}
