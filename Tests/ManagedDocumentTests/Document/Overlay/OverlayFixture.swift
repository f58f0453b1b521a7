#if canImport(Glibc)
import Glibc
#endif
import Crypto
import Foundation
import GRDB
import SystemPackage
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

/// A base bundle for a working copy: its store written by ``BundleWriter`` (deflated, with a restart index and
/// segment digests), served by a ``InPlaceStore``, and the loose store it was made from (a model's start).
struct OverlayFixture {
    let bundle: FilePath
    let loose: FilePath
    let identity: OverlayMap.BaseIdentity
    let digest: String

    init(bundle: FilePath, loose: FilePath, identity: OverlayMap.BaseIdentity, digest: String) {
        self.bundle = bundle
        self.loose = loose
        self.identity = identity
        self.digest = digest
    }

    /// A bundle of a store of about `bytes` bytes (4 KiB pages) in `directory`.
    init(in directory: FilePath, bytes: Int) throws {
        (bundle, loose) = try BundleStoreTests.bundle(in: directory, pageSize: 4096, bytes: bytes, level: 2)
        let status = try Stat(bundle, followTargetSymlink: false)
        identity = OverlayMap.BaseIdentity(status.identity)
        digest = try BundleReader(at: bundle).metadata.store.contentDigest
    }

    /// The base's store served segment by segment from the bundle.
    func source() throws -> InPlaceStore {
        let reader = try BundleReader(at: bundle)
        guard case .inPlace(let plan) = StoreRoute(reader) else {
            throw DocumentError(.invalidArgument, path: bundle, reason: "the fixture's store is not served in place")
        }
        return InPlaceStore(reader, plan: plan, cacheSize: 1 << 20)
    }

    /// A new working folder (mode 0700) named `name` in `directory` with an empty overlay over the base.
    func create(_ name: String, in directory: FilePath) throws -> OverlayStore {
        let folder = directory.appending(name)
        try FileSystem.createDirectory(folder, mode: 0o700)
        return try OverlayStore.create(folder: folder, base: source(), pageSize: 4096, baseIdentity: identity,
                                       baseDigest: digest)
    }

    /// The working copy in `folder`, recovered.
    func open(_ folder: FilePath) throws -> OverlayStore {
        try OverlayStore.open(folder: folder, base: source(), expectedDigest: digest)
    }

    /// A copy of the loose store at `path`, in rollback journal mode: the model a test applies the same SQL to.
    func model(at path: FilePath) throws -> DatabaseQueue {
        _ = try FileSystem.copyFile(loose, to: path)
        return try DatabaseQueue(path: path.string)
    }
}

/// A connection to a working copy through ``OverlayVFS``, with the registration that keeps its URI open.
struct OverlayConnection {
    let store: OverlayStore
    let registration: OverlayStore.Registration
    let queue: DatabaseQueue

    init(_ store: OverlayStore) throws {
        self.store = store
        registration = try OverlayStore.Registration(store)
        var configuration = Configuration()
        configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA journal_mode = DELETE") }
        queue = try DatabaseQueue(path: registration.uri, configuration: configuration)
    }

    /// Every table's row digest (``OverlayFiles/digests(_:)``).
    func digests() throws -> [String: String] { try OverlayFiles.digests(queue) }

    func close() throws { try queue.close() }
}

enum OverlayFiles {
    /// Copies the working folder's files (overlay, map, and the journal when there is one) into a new folder:
    /// the image a crash at this moment leaves.
    static func image(of folder: FilePath, to destination: FilePath) throws {
        try FileSystem.createDirectory(destination, mode: 0o700)
        for name in try FileSystem.contentsOfDirectory(folder) where !name.hasPrefix(".") {
            _ = try FileSystem.copyFile(folder.appending(name), to: destination.appending(name))
        }
    }

    /// The bytes a file takes on disk (`st_blocks`), not its length.
    static func allocatedBytes(_ path: FilePath) throws -> Int64 {
        var info = stat()
        guard stat(path.string, &info) == 0 else { throw Errno(rawValue: errno) }
        return Int64(info.st_blocks) * 512
    }

    /// Every table's SHA-256 of every value of every row, blobs byte for byte, and the schema's.
    static func digests(_ queue: DatabaseQueue) throws -> [String: String] {
        try queue.read { db in
            var result: [String: String] = [:]
            let schema = try String.fetchAll(db, sql: "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name")
            result["(schema)"] = ZipSurgery.sha256(Array(schema.joined(separator: ";").utf8))
            let tables = try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            for table in tables {
                var hasher = SHA256()
                let rows = try Row.fetchCursor(db, sql: "SELECT * FROM \"\(table)\" ORDER BY rowid")
                while let row = try rows.next() {
                    for value in row.databaseValues {
                        if case .blob(let data) = value.storage {
                            hasher.update(data: Array("blob \(data.count):".utf8))
                            hasher.update(data: data)
                        } else {
                            hasher.update(data: Array("\(value);".utf8))
                        }
                    }
                    hasher.update(data: [0x0A])
                }
                result[table] = Array(hasher.finalize()).map { String(format: "%02x", $0) }.joined()
            }
            return result
        }
    }
}
