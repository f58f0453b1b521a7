import Foundation
import GRDB
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

/// A small file system that fills up mid-write: a size-limited tmpfs, mounted for the test (as root), resized with
/// `remount` to give the rerun its space. Every case: the specific error, the sources and the previous bundle
/// byte-identical, no temporary left behind, and a rerun with space that finishes the job.
@Suite("Full disks: each write fails with 'no space left', leaves everything as it was, and a rerun finishes", .serialized, .serialChain,
       .enabled(if: getuid() == 0, "mounting a tmpfs needs root"))
struct DiskFullTests {
    /// Runs `body` with a tmpfs of `kilobytes` mounted at a fresh folder (the suite runs only as root); a refused
    /// mount fails the test.
    private func withSmallDisk(_ kilobytes: Int, _ body: (_ disk: FilePath, _ grow: (Int) throws -> Void) async throws -> Void) async throws {
        try await withTemporaryDirectory { directory in
            let disk = directory.appending("disk")
            try FileSystem.createDirectory(disk)
            let mounted = try run("/bin/mount", ["-t", "tmpfs", "-o", "size=\(kilobytes)k,mode=0755", "tmpfs", disk.string])
            try #require(mounted.status == 0, "mount refused: \(mounted.output.trimmingCharacters(in: .whitespacesAndNewlines))")
            defer { _ = try? run("/bin/umount", ["-l", disk.string]) }  // Squash: the folder goes with the test.
            try await body(disk) { size in
                let grown = try run("/bin/mount", ["-o", "remount,size=\(size)k", disk.string])
                #expect(grown.status == 0, "\(grown.output)")
            }
        }
    }

    private func expectNoSpace(_ error: DocumentError?, _ what: String) {
        #expect(error?.code == .ioFailure, "\(what): \(String(describing: error))")
        #expect(error?.reason.contains("no space left") == true, "\(what): \(String(describing: error))")
    }

    /// Names in `folder` that a write left behind (temporaries, scratch folders; not an open document's lock).
    private func leftovers(_ folder: FilePath) throws -> [String] {
        try FileSystem.contentsOfDirectory(folder).filter { $0.hasPrefix(".") && !$0.hasSuffix(".mdz.lock") }
    }

    @Test("convert: the bundle does not fit beside its store")
    func convert() async throws {
        try await withSmallDisk(5 * 1024) { disk, grow in
            let store = disk.appending("Big.sqlite")
            try Fixtures.makeBlobStore(at: store, rows: 48, blobSize: 65_536, seed: 1)  // 3 MiB
            let before = try FileDigest(of: store)
            var options = ConversionOptions()
            options.legacyPolicy = .keep
            let error = #expect(throws: DocumentError.self) { _ = try LegacyConverter(options: options).convert(storeAt: store) }
            expectNoSpace(error, "convert")
            #expect(try FileDigest(of: store) == before, "the source is as it was")
            #expect(try FileSystem.contentsOfDirectory(disk).sorted() == ["Big.sqlite"], "nothing left behind")
            try grow(16 * 1024)
            let report = try LegacyConverter(options: options).convert(storeAt: store)
            _ = try BundleReader(at: FilePath(report.bundle)).verify(full: true)
            #expect(try FileDigest(of: store) == before)
        }
    }

    @Test("Document.save, full and incremental: the new bundle does not fit (an incremental one's segments copied from the bundle neither); the previous one stays, the changes wait for another try, and with space the save is what it would have been",
          arguments: [false, true])
    func save(incremental: Bool) async throws {
        // > Full: 5 MiB of random blobs (stored) on 4 MiB. Incremental: about 10 MiB of hexadecimal text, deflated to
        // > about half, saved once, then one row changed: one bundle fits on 6 MiB, two do not.
        try await withSmallDisk(incremental ? 6 * 1024 : 4 * 1024) { disk, grow in
            try await withTemporaryDirectory { elsewhere in
                let bundle = disk.appending("Notes.mdz")
                var options = Document.OpenOptions()
                options.createIfMissing = true
                options.workingDirectory = elsewhere.appending("working")
                let document = try await Document.open(at: bundle, options: options)
                try await document.writer.write { db in
                    try db.execute(sql: "CREATE TABLE note(id INTEGER PRIMARY KEY, body)")
                    for _ in 0..<(incremental ? 4000 : 80) {
                        try db.execute(sql: incremental ? "INSERT INTO note(body) VALUES (hex(randomblob(1300)))"
                                                        : "INSERT INTO note(body) VALUES (randomblob(65536))")
                    }
                }
                if incremental {
                    try await document.save()
                    let size = try Fixtures.bytes(of: bundle).count
                    #expect(size > 3 << 20 && size < 6 << 20, "\(size) bytes: the disk must hold one, not two")
                    try await document.writer.write { db in try db.execute(sql: "UPDATE note SET body = 'x' WHERE id = 7") }
                }
                let previous = try Fixtures.bytes(of: bundle)
                let error = await #expect(throws: DocumentError.self) { try await document.save() }
                expectNoSpace(error, "save")
                #expect(document.state == .savingFailed)
                #expect(try Fixtures.bytes(of: bundle) == previous, "the previous bundle is byte-identical")
                let left = try leftovers(disk)
                #expect(left.isEmpty, "\(left)")
                try grow(16 * 1024)
                try await document.save()
                #expect(document.lastSave?.mode == (incremental ? .incremental : .full), "\(String(describing: document.lastSave))")
                #expect(document.state == .normal)
                try await document.close()
                #expect(try BundleReader(at: bundle).verify(full: true).rowCounts["note"] == (incremental ? 4000 : 80))
            }
        }
    }

    @Test("extract: the store does not fit where it is extracted; nothing is left there")
    func extract() async throws {
        try await withSmallDisk(2 * 1024) { disk, grow in
            try await withTemporaryDirectory { elsewhere in
                let store = elsewhere.appending("Big.sqlite")
                try Fixtures.makeBlobStore(at: store, rows: 48, blobSize: 65_536, seed: 1)  // 3 MiB
                let bundle = elsewhere.appending("Big.mdz")
                try BundleWriter.createDocument(at: bundle, copyingStore: store)
                let before = try Fixtures.bytes(of: bundle)
                let reader = try BundleReader(at: bundle)
                let intoFolder = #expect(throws: DocumentError.self) { try reader.extract(into: disk.appending("out")) }
                expectNoSpace(intoFolder, "extract --directory")
                let asStore = #expect(throws: DocumentError.self) { _ = try reader.extractStore(to: disk.appending("Big.sqlite")) }
                expectNoSpace(asStore, "extract --output")
                let left = try FileSystem.contentsOfDirectory(disk)
                #expect(left.isEmpty, "\(left)")
                #expect(try Fixtures.bytes(of: bundle) == before)
                try grow(16 * 1024)
                let placed = try reader.extractStore(to: disk.appending("Big.sqlite"))
                #expect(try FileDigest(of: placed.store) == FileDigest(of: store))
            }
        }
    }

    @Test("batch: the store that does not fit fails with its reason, the others convert or fail only for want of space; a rerun finishes")
    func batch() async throws {
        try await withSmallDisk(6 * 1024) { disk, grow in
            let small = [disk.appending("a.sqlite"), disk.appending("b.sqlite")]
            for (index, store) in small.enumerated() { try Fixtures.makeBlobStore(at: store, rows: 0, blobSize: 65_536, seed: UInt64(index)) }
            for store in small {
                let queue = try DatabaseQueue(path: store.string)
                try await queue.write { db in try db.execute(sql: "INSERT INTO blob(payload) VALUES (randomblob(1000))") }
                try queue.close()
            }
            let big = disk.appending("big.sqlite")
            try Fixtures.makeBlobStore(at: big, rows: 48, blobSize: 65_536, seed: 1)  // 3 MiB
            let digests = try [small[0], small[1], big].map { try FileDigest(of: $0).sha256 }
            var options = BatchOptions()
            options.jobs = 1
            options.conversion.legacyPolicy = .keep
            let items = Locked<[BatchItem]>([])
            _ = try await BatchConverter(root: disk, options: options).run { item in items.withValue { $0.append(item) } }
            let outcomes = Dictionary(uniqueKeysWithValues: items.withValue { $0 }.map { ($0.source, $0) })
            // > One job computes at a time, but a conversion waiting for the disk lets the next one go on: a small
            // > store written while the big one's temporary fills the disk may fail with it. Each fails only for
            // > want of space, and a rerun converts it.
            for name in ["a.sqlite", "b.sqlite"] {
                let item = outcomes[name]
                #expect(item?.outcome == .converted
                        || (item?.outcome == .failed && item?.error?.message.contains("no space left") == true),
                        "\(name): \(String(describing: item?.outcome)) \(String(describing: item?.error))")
            }
            #expect(outcomes["big.sqlite"]?.outcome == .failed)
            #expect(outcomes["big.sqlite"]?.error?.message.contains("no space left") == true,
                    "\(String(describing: outcomes["big.sqlite"]?.error))")
            #expect(try [small[0], small[1], big].map { try FileDigest(of: $0).sha256 } == digests, "sources intact")
            let left = try leftovers(disk)
                #expect(left.isEmpty, "\(left)")
            try grow(16 * 1024)
            let again = Locked<[BatchItem]>([])
            _ = try await BatchConverter(root: disk, options: options).run { item in again.withValue { $0.append(item) } }
            let rerun = Dictionary(uniqueKeysWithValues: again.withValue { $0 }.map { ($0.source, $0.outcome) })
            #expect(rerun["big.sqlite"] == .converted, "\(rerun)")
            for name in ["a.sqlite", "b.sqlite"] {
                #expect(rerun[name] == (outcomes[name]?.outcome == .converted ? .alreadyDone : .converted), "\(rerun)")
            }
        }
    }

    @Test("migrate: the migrated document does not fit; the bundle is byte-identical and the next open retries")
    func migrate() async throws {
        try await withSmallDisk(3 * 1024) { disk, grow in
            try await withTemporaryDirectory { elsewhere in
                let bundle = disk.appending("Notes.mdz")
                var options = Document.OpenOptions()
                options.createIfMissing = true
                options.workingDirectory = elsewhere.appending("working")
                try await Document.open(at: bundle, options: options).close()
                let before = try Fixtures.bytes(of: bundle)
                var migrator = DocumentMigrator(modelName: "Notes", modelVersion: "2")
                migrator.registerMigration("v2-attachments") { db in
                    try db.execute(sql: "CREATE TABLE attachment(data BLOB)")
                    for _ in 0..<64 { try db.execute(sql: "INSERT INTO attachment VALUES (randomblob(65536))") }
                }
                options.migrations = migrator
                let error = await #expect(throws: DocumentError.self) { _ = try await Document.open(at: bundle, options: options) }
                expectNoSpace(error, "migrate")
                #expect(try Fixtures.bytes(of: bundle) == before, "the bundle is byte-identical")
                let left = try leftovers(disk)
                #expect(left.isEmpty, "\(left)")
                try grow(16 * 1024)
                let migrated = try await Document.open(at: bundle, options: options)
                #expect(migrated.appliedMigrations == ["v2-attachments"])
                try await migrated.close()
            }
        }
    }
}
