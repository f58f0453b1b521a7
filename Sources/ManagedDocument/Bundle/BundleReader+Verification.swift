#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SystemPackage
@_spi(Core) import MDZCore

/// What ``BundleReader/verify(full:workingDirectory:)`` checked and found.
public struct VerificationReport: Sendable, Codable, Equatable {
    /// Entries whose CRC-32, size and SHA-256 were checked.
    public var entryCount: Int
    /// Bytes inflated.
    public var uncompressedBytes: UInt64
    /// `integrity_check` (full) or `quick_check`.
    public var sqliteCheck: String
    /// Row count per table of the store.
    public var rowCounts: [String: Int]
}

extension BundleReader {
    /// Checks everything the reader checks, then the store with SQLite: `PRAGMA integrity_check` when `full`,
    /// `PRAGMA quick_check` otherwise, and the store's page size, `user_version` and schema against the metadata.
    ///
    /// The store is inflated into a private folder inside `workingDirectory` (default: the system's temporary
    /// folder) and removed afterwards. The bundle is never changed.
    public func verify(full: Bool, workingDirectory: FilePath? = nil) throws -> VerificationReport {
        let parent = workingDirectory ?? FilePath(FileManager.default.temporaryDirectory.path)
        let scratch = try FileSystem.makeTemporaryDirectory(in: parent, prefix: ".verify-")
        defer { try? FileSystem.removeTree(scratch) }  // Squash cleanup error: the verdict is what counts.
        let uncompressed = try streamEntries(into: scratch, checkingSegments: true) { $0.role == .store }
        let store = scratch.appending(BundleLayout.store)
        let facts = try StoreInspector.inspectSelfContained(store, fullCheck: full, bundle: path,
                                                            entry: BundleLayout.store)
        try checkStoreFacts(facts)
        return VerificationReport(entryCount: entries.filter { !$0.isDirectory }.count,
                                  uncompressedBytes: uncompressed,
                                  sqliteCheck: full ? "integrity_check" : "quick_check", rowCounts: facts.rowCounts)
    }

    /// Compares what SQLite says about the extracted store with what the metadata says.
    func checkStoreFacts(_ facts: StoreFacts) throws {
        func mismatch(_ what: String, _ said: String, _ found: String) -> DocumentError {
            DocumentError(.metadataMismatch, path: path, entry: BundleLayout.store,
                          reason: "the metadata says \(what) \(said) but the store has \(found); the metadata lies")
        }
        let store = metadata.store
        if store.pageSize != facts.pageSize { throw mismatch("page size", "\(store.pageSize)", "\(facts.pageSize)") }
        if store.userVersion != facts.userVersion {
            throw mismatch("user_version", "\(store.userVersion)", "\(facts.userVersion)")
        }
        if store.schemaFingerprint != facts.schemaFingerprint {
            throw mismatch("schema fingerprint", store.schemaFingerprint, facts.schemaFingerprint)
        }
    }
}
