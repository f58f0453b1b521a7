#if canImport(Glibc)
import Glibc
#endif
import CSQLite
import GRDBSQLite  // sqlite3.h's types are attributed to the first module that includes it: GRDB's

/// A read-only SQLite VFS whose files are ``StoreSlot``s: SQLite reads a store's pages straight from its bundle,
/// nothing is extracted. Registered once per process (not as the default VFS); a store is opened through the `file:`
/// URI of a ``StoreSlot/Registration``, whose `slot` parameter `xOpen` reads with `sqlite3_uri_int64`, as SQLite's
/// memvfs reads its buffer's address. Everything else (temporary files, randomness, time) goes to the default VFS.
enum BundleVFS {
    static let name = "managed-document-bundle"

    /// Registers the VFS (once); whether SQLite accepted it.
    static let isRegistered: Bool = register()

    private static func file(_ pointer: UnsafeMutablePointer<sqlite3_file>?) -> StoreSlot? {
        guard let raw = pointer.map(UnsafeMutableRawPointer.init)?.assumingMemoryBound(to: md_bundle_file.self),
              let slot = raw.pointee.store else { return nil }
        return Unmanaged<StoreSlot>.fromOpaque(slot).takeUnretainedValue()
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
        methods.pointee.iVersion = 1
        methods.pointee.xClose = { file in
            if let raw = file.map(UnsafeMutableRawPointer.init)?.assumingMemoryBound(to: md_bundle_file.self),
               let store = raw.pointee.store {
                Unmanaged<StoreSlot>.fromOpaque(store).release()
                raw.pointee.store = nil
            }
            return SQLITE_OK
        }
        methods.pointee.xRead = { file, buffer, count, offset in
            guard let store = BundleVFS.file(file)?.source, let buffer else { return md_sqlite_ioerr_read }
            do {
                let copied = try store.read(into: buffer, count: Int(count), at: offset)
                guard copied == Int(count) else {
                    (buffer + copied).initializeMemory(as: UInt8.self, repeating: 0, count: Int(count) - copied)
                    return md_sqlite_ioerr_short_read
                }
                return SQLITE_OK
            } catch let error as DocumentError {
                store.fail(error)
                return md_sqlite_ioerr_read
            } catch {
                store.fail(DocumentError(.ioFailure, path: store.origin, entry: BundleLayout.store,
                                         reason: "cannot read the store: \(error)"))
                return md_sqlite_ioerr_read
            }
        }
        methods.pointee.xWrite = { _, _, _, _ in SQLITE_READONLY }
        methods.pointee.xTruncate = { _, _ in SQLITE_READONLY }
        methods.pointee.xSync = { _, _ in SQLITE_OK }
        methods.pointee.xFileSize = { file, size in
            guard let store = BundleVFS.file(file)?.source else { return md_sqlite_ioerr_fstat }
            size?.pointee = store.size
            return SQLITE_OK
        }
        methods.pointee.xLock = { _, _ in SQLITE_OK }
        methods.pointee.xUnlock = { _, _ in SQLITE_OK }
        methods.pointee.xCheckReservedLock = { _, result in
            result?.pointee = 0
            return SQLITE_OK
        }
        methods.pointee.xFileControl = { _, _, _ in SQLITE_NOTFOUND }
        methods.pointee.xSectorSize = { _ in 4096 }
        methods.pointee.xDeviceCharacteristics = { file in
            BundleVFS.file(file)?.isImmutable == false ? 0 : SQLITE_IOCAP_IMMUTABLE
        }
        return MethodsTable(pointer: methods)
    }()

    private static func register() -> Bool {
        // > Room for the default VFS's own files too: temporary files (a large sort) go to it.
        guard let vfs = DelegatingVFS.make(named: name, fileSize: MemoryLayout<md_bundle_file>.size) else { return false }
        vfs.pointee.mxPathname = 1024
        vfs.pointee.xOpen = { vfs, name, file, flags, outFlags in
            guard let file else { return SQLITE_CANTOPEN }
            guard flags & SQLITE_OPEN_MAIN_DB != 0 else {
                // > Not the store: a temporary file (a sort, a temporary table), served by the default VFS.
                let fallback = DelegatingVFS.fallback(vfs)
                return fallback.pointee.xOpen(fallback, name, file, flags, outFlags)
            }
            let raw = UnsafeMutableRawPointer(file).assumingMemoryBound(to: md_bundle_file.self)
            raw.pointee.base.pMethods = nil
            raw.pointee.store = nil
            // > sqlite3_uri_int64(F,P,D) "converts the value of P into a 64-bit signed integer and returns that
            // > integer, or D if P does not exist. If the value of P is something other than an integer, then zero is
            // > returned." Both are 0 here, never a slot's number; F is the name xOpen is given for a main database.
            guard flags & SQLITE_OPEN_READWRITE == 0,
                  let slot = StoreSlot.Registration.slot(numbered: sqlite3_uri_int64(name, "slot", 0)) else {
                return SQLITE_CANTOPEN
            }
            raw.pointee.store = Unmanaged.passRetained(slot).toOpaque()
            raw.pointee.base.pMethods = UnsafePointer(BundleVFS.methods)
            outFlags?.pointee = SQLITE_OPEN_READONLY
            return SQLITE_OK
        }
        // > The store's path is a name in a folder that does not exist: taken as it is, never resolved.
        vfs.pointee.xFullPathname = { _, name, count, output in
            guard let name, let output, count > 0 else { return SQLITE_CANTOPEN }
            let length = min(Int(count) - 1, strlen(name))
            memcpy(output, name, length)
            output[length] = 0
            return SQLITE_OK
        }
        return sqlite3_vfs_register(vfs, 0) == SQLITE_OK
    }
}
