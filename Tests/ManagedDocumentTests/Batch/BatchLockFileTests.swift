#if canImport(Glibc)
import Glibc
#endif
import Foundation
@_spi(Core) import MDZCore
import ManagedDocument
import Synchronization
import SystemPackage
import TestSupport
import Testing

/// The document locks a batch takes, seen from outside as another writer sees them (an exclusive `flock(2)` on
/// `.NAME.mdz.lock`, taken the way `Document` takes it), and what a batch leaves in the tree. Public API only.
@Suite("batch: document locks and folder flushes, seen from outside")
struct BatchLockFileTests {
    /// Takes a document's lock as a writer does: opens (creating) `.NAME.mdz.lock` and locks it without waiting.
    /// The descriptor holding it, or `nil` when another holder has it.
    private static func takeLock(of bundle: FilePath) -> Int32? {
        let folder = bundle.removingLastComponent()
        let path = folder.appending(".\(bundle.lastComponent?.string ?? "").lock")
        let descriptor = open(path.string, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { return nil }
        if flock(descriptor, LOCK_EX | LOCK_NB) == 0 { return descriptor }
        close(descriptor)
        return nil
    }

    /// Names under `root` a conversion or a lock leaves when it does not clean up after itself.
    private static func leftovers(under root: FilePath) -> [String] {
        let enumerator = FileManager.default.enumerator(atPath: root.string)
        var found: [String] = []
        while let relative = enumerator?.nextObject() as? String {
            if relative.hasSuffix(".partial") || relative.hasSuffix(".partial.d") || relative.hasSuffix(".lock") {
                found.append(relative)
            }
        }
        return found.sorted()
    }

    private static func makeStores(in folder: FilePath, count: Int) throws -> [FilePath] {
        try FileManager.default.createDirectory(atPath: folder.string, withIntermediateDirectories: true)
        return try (0..<count).map { index in
            try Fixtures.makeStore(at: folder.appending("Store\(index).sqlite"), rows: 20 + index, seed: UInt64(index + 1))
        }
    }

    private static func options(jobs: Int, busyTimeout: Double = 5) -> BatchOptions {
        var options = BatchOptions()
        options.jobs = jobs
        options.conversion.legacyPolicy = .keep
        options.conversion.busyTimeout = busyTimeout
        return options
    }

    @Test("while an item converts, its document lock is held: a writer taking it gets none; afterwards none is left")
    func lockHeldWhileConverting() async throws {
        try await withTemporaryDirectory { directory in
            let stores = try Self.makeStores(in: directory.appending("a"), count: 12)
            let taken = Mutex<[String]>([])
            let batch = BatchConverter(root: directory, options: Self.options(jobs: 2))
            let summary = try await batch.run(starting: { source in
                let bundle = directory.appending(source).removingLastComponent()
                    .appending("\(FilePath(source).stem ?? "").mdz")
                if let descriptor = Self.takeLock(of: bundle) {  // the batch does not hold it: record, let go
                    taken.withLock { $0.append(source) }
                    close(descriptor)
                }
            }, { _ in })
            #expect(summary.count(.converted) == stores.count)
            #expect(taken.withLock { $0 } == [], "the lock of these items was free while they converted")
            #expect(Self.leftovers(under: directory) == [])
        }
    }

    @Test("an item whose lock another writer holds is busy; once it lets go (its lock file left behind), a rerun converts it")
    func heldLockMakesItemBusy() async throws {
        try await withTemporaryDirectory { directory in
            let folder = directory.appending("a")
            let stores = try Self.makeStores(in: folder, count: 4)
            let held = try #require(Self.takeLock(of: folder.appending("Store1.mdz")))
            let first = try await BatchConverter(root: directory, options: Self.options(jobs: 2, busyTimeout: 0.3))
                .run { _ in }
            #expect(first.count(.converted) == stores.count - 1)
            #expect(first.count(.busy) == 1)
            #expect(!FileManager.default.fileExists(atPath: folder.appending("Store1.mdz").string))
            // The other writer's lock file is its own: the batch neither removed nor replaced it.
            #expect(Self.leftovers(under: directory) == ["a/.Store1.mdz.lock"])
            close(held)  // a writer that died: its lock file stays, unlocked
            let second = try await BatchConverter(root: directory, options: Self.options(jobs: 2, busyTimeout: 0.3))
                .run { _ in }
            #expect(second.count(.converted) == 1)
            #expect(second.count(.alreadyDone) == stores.count - 1)
            let reader = try BundleReader(at: folder.appending("Store1.mdz"))
            #expect(reader.metadata.provenance?.fileName == "Store1.sqlite")
            #expect(Self.leftovers(under: directory) == [], "the lock file left behind is taken and removed")
        }
    }

    @Test("many stores of one folder converted at once: every bundle is in place, verified, and named in its folder")
    func oneFolderManyJobs() async throws {
        try await withTemporaryDirectory { directory in
            let folder = directory.appending("shared")
            let stores = try Self.makeStores(in: folder, count: 24)
            let summary = try await BatchConverter(root: directory, options: Self.options(jobs: 4)).run { _ in }
            #expect(summary.count(.converted) == stores.count)
            let names = Set(try FileManager.default.contentsOfDirectory(atPath: folder.string))
            for index in stores.indices {
                #expect(names.contains("Store\(index).mdz"))
                let report = try BundleReader(at: folder.appending("Store\(index).mdz")).verify(full: true)
                #expect(report.rowCounts.values.reduce(0, +) > 0)
            }
            #expect(Self.leftovers(under: directory) == [])
        }
    }
}
