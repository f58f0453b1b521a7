import Crypto
import GRDB
import GRDBSQLite  // sqlite3_deserialize, sqlite3_compileoption_used
import SystemPackage
@_spi(Core) import MDZCore

/// What SQLite says about a store file.
public struct StoreFacts: Sendable, Equatable {
    /// `PRAGMA page_size`.
    public var pageSize: Int
    /// `PRAGMA user_version`.
    public var userVersion: Int32
    /// `PRAGMA application_id`.
    public var applicationID: Int32
    /// SHA-256 (lowercase hex) of `type`, `name`, `tbl_name` and `sql` of every `sqlite_master` row, ordered by
    /// type then name, each field followed by a 0x1F byte and each row by 0x1E (a missing `sql` is empty).
    /// `rootpage` is left out, so a `VACUUM` does not change it.
    public var schemaFingerprint: String
    /// Row count of every table (not views, not virtual tables), by name; empty when rows were not counted.
    public var rowCounts: [String: Int]
}

/// Checks and facts about SQLite store files, read through GRDB.
enum StoreInspector {
    /// Whether this process's SQLite reads `file:` URIs in file names (built with `SQLITE_USE_URI`, as Debian's and
    /// most distributions' are); ``immutableURI(_:)`` is only used when it does. Asked of the library itself
    /// (`sqlite3_compileoption_used`, what the SQL function `sqlite_compileoption_used` answers with), not through a
    /// connection: opening an in-memory database only to ask costs a fresh `docconvert query` a millisecond.
    static let opensURIs: Bool = sqlite3_compileoption_used("USE_URI") != 0

    /// The `file:` URI that opens a store read-only as an immutable file: SQLite takes no lock and looks at no
    /// journal. Only for a file whose committed state cannot change meanwhile (a lock of ours keeps writers out).
    /// `nil` when SQLite does not read URIs, or the path has no faithful one.
    static func immutableURI(_ path: FilePath) -> String? {
        let text = path.string
        guard opensURIs, FilePath(text) == path, !text.hasPrefix("//"), !text.isEmpty else { return nil }
        var escaped = "file:"
        for character in text.unicodeScalars {
            switch character {
            case "%": escaped += "%25"
            case "?": escaped += "%3f"
            case "#": escaped += "%23"
            default: escaped.unicodeScalars.append(character)
            }
        }
        return escaped + "?mode=ro&immutable=1"
    }

    /// Opens a store read-only. The caller makes sure it is not in WAL mode when the folder must not change.
    ///
    /// - Parameter isPrivate: the file is this process's own (a scratch copy) or read under the converter's lock:
    ///   the connection keeps its lock from the first read to its close (`locking_mode = EXCLUSIVE`) instead of
    ///   taking and dropping it, and checking for a journal, around every statement; its page cache is 512 KiB.
    /// - Parameter immutableURI: open this URI (``immutableURI(_:)``) instead of `path`.
    static func openReadOnly(_ path: FilePath, isPrivate: Bool = false, immutableURI: String? = nil) throws -> DatabaseQueue {
        var configuration = Configuration()
        configuration.readonly = true
        configuration.label = "ManagedDocument.inspect"
        if isPrivate {
            // > A check walks every page once; a 512 KiB cache (not 2 MiB) costs it about 10 % on a large store.
            let locking = immutableURI == nil ? "PRAGMA locking_mode = EXCLUSIVE; " : ""
            configuration.prepareDatabase { db in try db.execute(sql: locking + "PRAGMA cache_size = -512") }
        }
        return try DatabaseQueue(path: immutableURI ?? path.string, configuration: configuration)
    }

    /// Opens a store image read-only where it lies in memory (`sqlite3_deserialize`): SQLite reads no file, so a
    /// small store read once (in place, under the converter's lock) is checked from the very bytes that are packed.
    /// The image must outlive the queue.
    static func openInMemory(_ image: InMemoryStore) throws -> DatabaseQueue {
        var configuration = Configuration()
        configuration.label = "ManagedDocument.inspect"
        // > Pages are read where they lie in the image (SQLite's memdb serves memory-mapped reads) rather than
        // > copied into a page cache: a check walks every page once.
        let count = image.bytes.count
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA cache_size = -64; PRAGMA mmap_size = \(count)")
        }
        let queue = try DatabaseQueue(configuration: configuration)
        try queue.writeWithoutTransaction { db in
            // > Without SQLITE_DESERIALIZE_FREEONCLOSE and RESIZEABLE, "the caller is responsible for freeing" the
            // > buffer, and with READONLY SQLite never writes it.
            guard let base = image.bytes.baseAddress, !image.bytes.isEmpty else {
                throw DatabaseError(resultCode: .SQLITE_NOTADB)
            }
            let size = sqlite3_int64(image.bytes.count)
            let status = sqlite3_deserialize(db.sqliteConnection, "main",
                                             UnsafeMutablePointer(mutating: base.assumingMemoryBound(to: UInt8.self)),
                                             size, size, UInt32(SQLITE_DESERIALIZE_READONLY))
            guard status == SQLITE_OK else { throw DatabaseError(resultCode: ResultCode(rawValue: status)) }
        }
        return queue
    }

    /// Facts about an open database.
    static func facts(_ db: Database, countingRows: Bool = true) throws -> StoreFacts {
        let pageSize = try Int.fetchOne(db, sql: "PRAGMA page_size") ?? 0
        let userVersion = try Int32.fetchOne(db, sql: "PRAGMA user_version") ?? 0
        let applicationID = try Int32.fetchOne(db, sql: "PRAGMA application_id") ?? 0
        var hasher = SHA256()
        let rows = try Row.fetchCursor(db, sql: "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name")
        var tables: [String] = []
        while let row = try rows.next() {
            let type: String = row[0] ?? ""
            let name: String = row[1] ?? ""
            let tableName: String = row[2] ?? ""
            let sql: String? = row[3]
            for field in [type, name, tableName, sql ?? ""] {
                hasher.update(data: Array(field.utf8))
                hasher.update(data: [0x1F])
            }
            hasher.update(data: [0x1E])
            if type == "table", let sql, !sql.uppercased().hasPrefix("CREATE VIRTUAL") {
                tables.append(name)
            }
        }
        var counts: [String: Int] = [:]
        for table in tables where countingRows {
            counts[table] = try Int.fetchOne(db, sql: "SELECT count(*) FROM \(table.quotedDatabaseIdentifier)") ?? 0
        }
        return StoreFacts(pageSize: pageSize, userVersion: userVersion, applicationID: applicationID,
                          schemaFingerprint: hasher.finalize().hexString, rowCounts: counts)
    }

    /// Runs `PRAGMA quick_check` or `PRAGMA integrity_check`; returns SQLite's complaints (empty when "ok").
    static func check(_ db: Database, full: Bool) throws -> [String] {
        let messages = try String.fetchAll(db, sql: full ? "PRAGMA integrity_check(100)" : "PRAGMA quick_check(100)")
        return messages == ["ok"] ? [] : messages
    }

    /// Opens a store that must be a self-contained, non-WAL SQLite file of this process's own (a scratch copy, an
    /// extracted store) and returns its facts after a check.
    ///
    /// - Throws: ``DocumentError/Code/notSQLite``, ``DocumentError/Code/storeInWALMode`` or
    ///   ``DocumentError/Code/storeCorrupt``, naming `bundle` and `entry` when given.
    ///
    /// - Parameter immutableURI: how to open a store read in place (a legacy store under the converter's lock).
    static func inspectSelfContained(_ path: FilePath, fullCheck: Bool, bundle: FilePath? = nil,
                                     entry: String? = nil, immutableURI: String? = nil) throws -> StoreFacts {
        try inspectSelfContained(StoreHeader(of: path, entry: entry, bundle: bundle), path: path, bundle: bundle,
                                 entry: entry, fullCheck: fullCheck) {
            try openReadOnly(path, isPrivate: true, immutableURI: immutableURI)
        }
    }

    /// ``inspectSelfContained(_:fullCheck:bundle:entry:immutableURI:)`` with the full check, of a store's bytes read
    /// whole into memory (`image`, read from `path`): SQLite checks those bytes, not the file.
    static func inspectSelfContained(_ image: InMemoryStore, path: FilePath) throws -> StoreFacts {
        try inspectSelfContained(image.header(), path: path, bundle: nil, entry: nil) { try openInMemory(image) }
    }

    private static func inspectSelfContained(_ header: StoreHeader, path: FilePath, bundle: FilePath?, entry: String?,
                                             fullCheck: Bool = true, opening open: () throws -> DatabaseQueue) throws -> StoreFacts {
        if header.isWAL {
            throw DocumentError(.storeInWALMode, path: bundle ?? path, entry: entry,
                                reason: "the store is in WAL mode, which a bundle must not be at rest")
        }
        do {
            let queue = try open()
            return try queue.read { db in
                let problems = try check(db, full: fullCheck)
                guard problems.isEmpty else {
                    throw DocumentError(.storeCorrupt, path: bundle ?? path, entry: entry,
                                        reason: "SQLite finds the store damaged: \(problems.prefix(3).joined(separator: "; "))")
                }
                return try facts(db)
            }
        } catch let error as DocumentError {
            throw error
        } catch let error as DatabaseError {
            let code: DocumentError.Code = error.resultCode == .SQLITE_NOTADB ? .notSQLite : .storeCorrupt
            throw DocumentError(code, path: bundle ?? path, entry: entry,
                                reason: "SQLite cannot read the store", underlyingError: error)
        }
    }
}
