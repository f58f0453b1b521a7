import GRDB
import SystemPackage
@_spi(Core) import MDZCore

/// Copies a SQLite store into one self-contained file through SQLite itself, and proves the copy is whole.
///
/// The copy is made with SQLite's online backup API, never by copying bytes: committed transactions that live
/// only in a `-wal` are included, a hot `-journal` is rolled back first by SQLite, and rowids stay as they are
/// (unlike `VACUUM`). The copy is switched to `journal_mode=DELETE`, then checked: `PRAGMA integrity_check`, the
/// same tables, and the same row count per table as the source. The source is opened read-only and never changed.
enum StoreConsolidator {
    /// What the consolidation found.
    struct Result {
        var facts: StoreFacts
    }

    /// Copies `source` to `destination` (which must not exist) and verifies the copy.
    ///
    /// - Parameters:
    ///   - busyTimeout: how long to wait for another process's write lock before reporting the store busy.
    /// - Throws: ``DocumentError/Code/notSQLite``, ``DocumentError/Code/storeBusy``,
    ///   ``DocumentError/Code/storeCorrupt`` or ``DocumentError/Code/verificationFailed``.
    static func consolidate(_ source: FilePath, into destination: FilePath,
                            busyTimeout: Double = 5) throws -> Result {
        _ = try StoreHeader(of: source)
        var sourceConfiguration = Configuration()
        sourceConfiguration.readonly = true
        sourceConfiguration.busyMode = .timeout(busyTimeout)
        sourceConfiguration.label = "ManagedDocument.source"
        let sourceFacts: StoreFacts
        do {
            let sourceQueue = try DatabaseQueue(path: source.string, configuration: sourceConfiguration)
            defer { try? sourceQueue.close() }  // Squash close error of a read-only connection.
            var destinationConfiguration = Configuration()
            destinationConfiguration.label = "ManagedDocument.copy"
            // Private scratch, packed into a bundle that is flushed and verified on its own: no flushes needed here.
            destinationConfiguration.prepareDatabase { db in try db.execute(sql: "PRAGMA synchronous = OFF") }
            let copy = try DatabaseQueue(path: destination.string, configuration: destinationConfiguration)
            defer { try? copy.close() }  // Squash close error: the copy is checked below through its own reads.
            // The source's facts and the backup come from one read transaction: one consistent snapshot.
            sourceFacts = try sourceQueue.read { db in
                let facts = try StoreInspector.facts(db)
                try copy.writeWithoutTransaction { copyDB in
                    try db.backup(to: copyDB)
                }
                return facts
            }
            try copy.writeWithoutTransaction { db in
                // The copy inherits WAL mode from page 1 of a WAL source; a bundle's store must not be WAL.
                try db.execute(sql: "PRAGMA journal_mode = DELETE")
            }
        } catch let error as DatabaseError {
            try? FileSystem.removeFile(destination)  // Cleanup after a first error.
            switch error.resultCode {
            case .SQLITE_BUSY, .SQLITE_LOCKED:
                throw DocumentError(.storeBusy, path: source,
                                    reason: "another process is writing the store; try again when it is done",
                                    underlyingError: error)
            case .SQLITE_NOTADB:
                throw DocumentError(.notSQLite, path: source, reason: "is not a SQLite database", underlyingError: error)
            default:
                throw DocumentError(.storeCorrupt, path: source, reason: "SQLite cannot read the store; it was left as it was",
                                    underlyingError: error)
            }
        }
        let copyFacts = try StoreInspector.inspectSelfContained(destination, fullCheck: true)
        guard copyFacts.rowCounts == sourceFacts.rowCounts,
              copyFacts.schemaFingerprint == sourceFacts.schemaFingerprint
        else {
            try? FileSystem.removeFile(destination)  // Cleanup after a first error.
            throw DocumentError(.verificationFailed, path: source,
                                reason: "the copy does not have the source's tables and row counts; nothing was changed")
        }
        return Result(facts: copyFacts)
    }
}
