#if canImport(Glibc)
import Glibc
#endif
import CMDZSQLite
import GRDBSQLite  // sqlite3.h's types are attributed to the first module that includes it: GRDB's
import SystemPackage
@_spi(Core) import MDZCore

/// A read-write SQLite VFS whose main database files are ``OverlayStore``s: a working copy made of its base bundle and
/// a private overlay (FORMAT.md 16.2). Registered once per process (not as the default VFS); a store is opened
/// through the `file:` URI of an ``OverlayStore/Registration``, whose `overlay` parameter `xOpen` reads with
/// `sqlite3_uri_int64`, as ``BundleVFS`` reads its `slot`.
///
/// The URI's path is the overlay file itself, so SQLite's rollback journal (`overlay-journal`) and its temporary
/// files are real files the default VFS serves, the journal through ``WorkingFilesVFS`` (its changes seen, its
/// removal made durable before the commit is acknowledged). (The default VFS reads the main file's mode and owner to create the
/// journal with the same: the main file's name must exist.) The store stays in a rollback journal mode: its methods
/// are version 1 (no shared memory), `PRAGMA journal_mode = WAL` fails (even in exclusive locking mode, where SQLite
/// would otherwise accept it without shared memory), and `xOpen` never opens a WAL file.
enum OverlayVFS {
    static let name = "managed-document-overlay"

    /// Registers the VFS (once); whether SQLite accepted it.
    static let isRegistered: Bool = register()

    /// The store a file SQLite opened through the VFS holds; `nil` for a file that failed to open.
    private static func store(_ pointer: UnsafeMutablePointer<sqlite3_file>?) -> OverlayStore? {
        guard let raw = pointer.map(UnsafeMutableRawPointer.init)?.assumingMemoryBound(to: md_overlay_file.self),
              let store = raw.pointee.store else { return nil }
        return Unmanaged<OverlayStore>.fromOpaque(store).takeUnretainedValue()
    }

    /// The store files' methods, made once and never changed: SQLite reads them from any thread.
    private static var methods: UnsafeMutablePointer<sqlite3_io_methods> { methodsTable.pointer }

    /// The methods' table, shared by every thread: written once, before any thread can see it, read only after.
    private struct MethodsTable: @unchecked Sendable {
        let pointer: UnsafeMutablePointer<sqlite3_io_methods>
    }

    private static let methodsTable: MethodsTable = {
        let methods = UnsafeMutablePointer<sqlite3_io_methods>.allocate(capacity: 1)
        methods.initialize(to: sqlite3_io_methods())
        // > Version 1: no xShmMap, so SQLite never puts the store in WAL mode.
        methods.pointee.iVersion = 1
        methods.pointee.xClose = { file in
            if let raw = file.map(UnsafeMutableRawPointer.init)?.assumingMemoryBound(to: md_overlay_file.self),
               let pointer = raw.pointee.store {
                let store = Unmanaged<OverlayStore>.fromOpaque(pointer)
                store.takeUnretainedValue().detach()
                store.release()
                raw.pointee.store = nil
            }
            return SQLITE_OK
        }
        methods.pointee.xRead = { file, buffer, count, offset in
            guard let store = OverlayVFS.store(file), let buffer else { return md_sqlite_ioerr_read }
            return store.sqliteRead(buffer, count: Int(count), at: offset)
        }
        methods.pointee.xWrite = { file, buffer, count, offset in
            guard let store = OverlayVFS.store(file), let buffer else { return md_sqlite_ioerr_write }
            return store.sqliteWrite(buffer, count: Int(count), at: offset)
        }
        methods.pointee.xTruncate = { file, size in
            guard let store = OverlayVFS.store(file) else { return md_sqlite_ioerr_truncate }
            return store.sqliteTruncate(size)
        }
        methods.pointee.xSync = { file, _ in
            guard let store = OverlayVFS.store(file) else { return md_sqlite_ioerr_fsync }
            return store.sqliteSync()
        }
        methods.pointee.xFileSize = { file, size in
            guard let store = OverlayVFS.store(file) else { return md_sqlite_ioerr_fstat }
            size?.pointee = store.logicalSize
            return SQLITE_OK
        }
        // > One connection in one process uses a working copy (a second xOpen fails): locks are not needed, and
        // > no reserved lock is ever seen, so SQLite rolls a hot journal back when it opens the store.
        methods.pointee.xLock = { _, _ in SQLITE_OK }
        methods.pointee.xUnlock = { _, _ in SQLITE_OK }
        methods.pointee.xCheckReservedLock = { _, result in
            result?.pointee = 0
            return SQLITE_OK
        }
        methods.pointee.xFileControl = { file, operation, argument in
            switch operation {
            case SQLITE_FCNTL_PRAGMA:
                return OverlayVFS.pragma(argument)
            case SQLITE_FCNTL_SYNC:
                // > "sent to the VFS immediately before the xSync method is invoked on a database file descriptor.
                // > Or, if the xSync method is not invoked because the user has configured SQLite with PRAGMA
                // > synchronous=OFF it is invoked in place of the xSync method." The commit is recorded here, so a
                // > transaction SQLite reported committed survives the process under every `synchronous` setting
                // > (OFF promises that much: only an OS crash or a power cut may lose it). The xSync that follows
                // > in the other settings finds nothing left to do.
                guard let store = OverlayVFS.store(file) else { return md_sqlite_ioerr_fsync }
                return store.sqliteSync()
            default:
                return SQLITE_NOTFOUND
            }
        }
        methods.pointee.xSectorSize = { _ in 4096 }
        // > Power-safe overwrite: a write changes no byte outside its range once a crash is recovered. A write into
        // > a present block writes its own bytes only; a block made present is written whole, but it is named in the
        // > map only after xSync flushed it, so a torn write of it is never read.
        methods.pointee.xDeviceCharacteristics = { _ in SQLITE_IOCAP_POWERSAFE_OVERWRITE }
        return MethodsTable(pointer: methods)
    }()

    /// `SQLITE_FCNTL_PRAGMA`: refuses `PRAGMA journal_mode = WAL` (which in exclusive locking mode SQLite would
    /// accept, and fail at the next transaction); leaves every other pragma to SQLite.
    private static func pragma(_ argument: UnsafeMutableRawPointer?) -> Int32 {
        // > "the argument is a pointer to an array of pointers to strings (char**) in which the second element of the
        // > array is the name of the pragma and the third element is the argument to the pragma or NULL"; an error
        // > message "obtained from sqlite3_mprintf()" may be left in the first (SQLite frees it with sqlite3_free).
        guard let arguments = argument?.assumingMemoryBound(to: UnsafeMutablePointer<CChar>?.self),
              let name = arguments[1], let value = arguments[2],
              String(cString: name).lowercased() == "journal_mode", String(cString: value).lowercased() == "wal"
        else { return SQLITE_NOTFOUND }
        let message = "a working copy stays in a rollback journal mode"
        if let copy = sqlite3_malloc(Int32(message.utf8.count + 1)) {
            message.withCString { copy.copyMemory(from: $0, byteCount: message.utf8.count + 1) }
            arguments[0] = copy.assumingMemoryBound(to: CChar.self)
        }
        return SQLITE_ERROR
    }

    /// `xOpen`: the store from the URI's registration, or any other file (the journal, a temporary file) from the
    /// default VFS; never the store's WAL.
    private static func open(_ vfs: UnsafeMutablePointer<sqlite3_vfs>?, _ name: sqlite3_filename?,
                             _ file: UnsafeMutablePointer<sqlite3_file>?, _ flags: Int32,
                             _ outFlags: UnsafeMutablePointer<Int32>?) -> Int32 {
        guard let file else { return SQLITE_CANTOPEN }
        // > sqlite3_uri_int64(F,P,D) reads a parameter of a main database's URI, and (since 3.31) of its journal's
        // > and WAL's names too; it returns D (0) when P is missing and 0 when it is not an integer: never a
        // > registration's number. A file without one is not a working copy's: an ATTACHed database, VACUUM INTO's
        // > target, their journals and WALs, temporary files; the default VFS serves them, as SQLite's own
        // > appendvfs does.
        let number = name.map { md_uri_int64($0, "overlay", 0) } ?? 0
        guard flags & SQLITE_OPEN_MAIN_DB != 0, number != 0 else {
            file.pointee.pMethods = nil
            // > The working copy's store never has a WAL (its methods are version 1, and the pragma is refused).
            guard number == 0 || flags & SQLITE_OPEN_WAL == 0 else { return SQLITE_CANTOPEN }
            // > Its journal through the working files' layer: every change seen, its removal durable.
            return WorkingFilesVFS.open(vfs, name, file, flags, outFlags)
        }
        let raw = UnsafeMutableRawPointer(file).assumingMemoryBound(to: md_overlay_file.self)
        raw.pointee.base.pMethods = nil
        raw.pointee.store = nil
        guard flags & SQLITE_OPEN_READWRITE != 0,
              let store = OverlayStore.Registration.store(numbered: number),
              store.attach() else {
            return SQLITE_CANTOPEN
        }
        raw.pointee.store = Unmanaged.passRetained(store).toOpaque()
        raw.pointee.base.pMethods = UnsafePointer(OverlayVFS.methods)
        outFlags?.pointee = flags
        return SQLITE_OK
    }

    /// Registers the VFS beside the default one (which serves everything but the store); whether SQLite accepted it.
    private static func register() -> Bool {
        // > Room for the default VFS's own files too: the journal and temporary files go to it.
        let fileSize = max(MemoryLayout<md_overlay_file>.size, WorkingFilesVFS.fileSize)
        guard let vfs = DelegatingVFS.make(named: name, fileSize: fileSize) else { return false }
        vfs.pointee.xOpen = { vfs, name, file, flags, outFlags in OverlayVFS.open(vfs, name, file, flags, outFlags) }
        vfs.pointee.xDelete = { vfs, name, syncFolder in WorkingFilesVFS.delete(vfs, name, syncFolder) }
        return md_vfs_register(vfs, 0) == SQLITE_OK
    }
}

extension OverlayStore {
    /// A store's entry in the table ``OverlayVFS`` opens files from, for as long as this object lives: its `deinit`
    /// removes the entry, so whoever keeps the connection keeps this beside it (as ``StoreSlot/Registration``).
    ///
    /// A URI whose registration is gone opens nothing (`SQLITE_CANTOPEN`), and a number is never given twice.
    final class Registration: Sendable {
        let store: OverlayStore
        /// The number `xOpen` reads from the URI's `overlay` parameter: never 0, never reused.
        let number: Int64

        private static let table = Protected<(next: Int64, stores: [Int64: OverlayStore])>((1, [:]))

        /// Registers `store` (and the VFS, once).
        ///
        /// - Throws: ``DocumentError/Code/ioFailure`` when SQLite does not accept the VFS.
        init(_ store: OverlayStore) throws {
            guard OverlayVFS.isRegistered else {
                throw DocumentError(.ioFailure, path: store.folder,
                                    reason: "this SQLite does not accept the working copy's VFS")
            }
            self.store = store
            number = Self.table.withLock { table in
                defer { table.next += 1 }
                table.stores[table.next] = store
                return table.next
            }
        }

        deinit { _ = Self.table.withLock { $0.stores.removeValue(forKey: number) } }

        /// The `file:` URI that opens the store through the VFS, read-write; give it to GRDB's
        /// `DatabaseQueue(path:configuration:)`. Its path is the overlay file, in the working folder: SQLite's
        /// journal (`overlay-journal`) is made beside it.
        var uri: String {
            "file:\(WorkingFilesVFS.uriPath(store.overlayPath.string))?vfs=\(OverlayVFS.name)&overlay=\(number)"
        }

        /// The store registered under `number`, while its registration lives.
        static func store(numbered number: Int64) -> OverlayStore? {
            table.withLock { $0.stores[number] }
        }
    }
}
