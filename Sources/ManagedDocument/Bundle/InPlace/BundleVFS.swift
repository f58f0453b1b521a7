#if canImport(Glibc)
import Glibc
#endif
import CMDZSQLite
import GRDBSQLite  // sqlite3.h's types are attributed to the first module that includes it: GRDB's
@_spi(Core) import MDZCore

/// A read-only SQLite VFS whose files are ``StoreSlot``s: SQLite reads a store's pages straight from its bundle,
/// nothing is extracted. Registered once per process (not as the default VFS); a store is opened through the `file:`
/// URI of a ``StoreSlot/Registration``, whose `slot` parameter `xOpen` reads with `sqlite3_uri_int64`, as SQLite's
/// memvfs reads its buffer's address; its files have ``StoreFileMethods``. Everything else (temporary files,
/// randomness, time) goes to the default VFS.
enum BundleVFS {
    static let name = "managed-document-bundle"

    /// Registers the VFS (once); whether SQLite accepted it.
    static let isRegistered: Bool = register()

    private static func register() -> Bool {
        // > Room for the default VFS's own files too: temporary files (a large sort) go to it.
        guard let vfs = DelegatingVFS.make(named: name, fileSize: MemoryLayout<md_bundle_file>.size) else { return false }
        vfs.pointee.mxPathname = 1024
        vfs.pointee.xOpen = { vfs, name, file, flags, outFlags in
            guard let file else { return SQLITE_CANTOPEN }
            guard flags & SQLITE_OPEN_MAIN_DB != 0 else {
                // > Not the store: a temporary file (a sort, a temporary table), served by the default VFS.
                return DelegatingVFS.openInFallback(vfs, name, file, flags, outFlags)
            }
            StoreFileMethods.clear(file)
            // > sqlite3_uri_int64(F,P,D) "converts the value of P into a 64-bit signed integer and returns that
            // > integer, or D if P does not exist. If the value of P is something other than an integer, then zero is
            // > returned." Both are 0 here, never a slot's number; F is the name xOpen is given for a main database.
            guard flags & SQLITE_OPEN_READWRITE == 0,
                  let slot = StoreSlot.Registration.slot(numbered: md_uri_int64(name, "slot", 0)) else {
                return SQLITE_CANTOPEN
            }
            StoreFileMethods.attach(slot, to: file)
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
        return md_vfs_register(vfs, 0) == SQLITE_OK
    }
}

extension StoreRoute {
    /// Why no store can be read in place in this process (its SQLite opens no `file:` URI, or refused the VFS);
    /// `nil` when stores can be.
    static var inPlaceUnavailable: String? {
        StoreInspector.opensURIs && BundleVFS.isRegistered
            ? nil : "this SQLite does not open file: URIs or does not accept the bundle VFS"
    }
}
