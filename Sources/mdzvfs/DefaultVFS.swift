#if canImport(Glibc)
import Glibc
#endif
import CMDZExtension
import CMDZSQLite
import SystemPackage
@_spi(Core) import MDZCore

/// Documents served by the process's default VFS (`sqlite3_mdzvfs_default_init`), for hosts that open a path and
/// cannot name a VFS: Datasette, sqlite-utils, pandas on a path, any program calling `sqlite3_open`.
///
/// The default VFS (SQLite's `unix`) keeps its identity and every method but one: its `xOpen` is interposed, so a
/// main database that is a bundle is served by the `mdz` VFS's reading (``DocumentVFS/open(_:_:_:_:named:fallback:)``),
/// and every other file (a plain database, a new one, an attached one, a `VACUUM INTO` target, journals, WALs,
/// temporary files) goes to its own `xOpen`, unchanged, creation included.
///
/// Why not register `mdz` as a new default VFS: SQLite matches a shared-cache database (`file:name?mode=memory&
/// cache=shared`) by name *and* VFS object, so one opened before the load and again after it would no longer be the
/// same database. Datasette's internal database is exactly that: its first connection is made, and then the extension
/// loaded into it, before the others (its pages then fail with "no such table: databases"). Interposed, the VFS object
/// stays the same, and connections made before the load serve documents too from their next open.
enum DefaultVFS {
    typealias Open = (sqlite3_filename?, UnsafeMutablePointer<sqlite3_file>?, Int32, UnsafeMutablePointer<Int32>?) -> Int32
    typealias CallOpen = @convention(c) (UnsafeMutablePointer<sqlite3_vfs>?, sqlite3_filename?,
                                         UnsafeMutablePointer<sqlite3_file>?, Int32, UnsafeMutablePointer<Int32>?) -> Int32

    /// The interposed default VFS and its own `xOpen`, set once (a VFS object lives as long as the process).
    private struct Interposition: @unchecked Sendable {  // pointers to SQLite's static VFS object and its function
        let vfs: UnsafeMutablePointer<sqlite3_vfs>
        let open: CallOpen
    }

    private static let interposition = Protected<Interposition?>(nil)

    /// Makes the default VFS serve documents (once a process: a second load finds it done); SQLite's result code.
    static func interpose() -> Int32 {
        interposition.withLock { interposition in
            guard interposition == nil else { return SQLITE_OK }
            guard let vfs = md_vfs_find(nil), let open = vfs.pointee.xOpen else { return SQLITE_ERROR }
            // > Its files hold a bundle's state (`md_bundle_file`) when they serve one.
            guard Int(vfs.pointee.szOsFile) >= MemoryLayout<md_bundle_file>.size else { return SQLITE_ERROR }
            interposition = Interposition(vfs: vfs, open: open)
            // > One aligned pointer store: a thread opening a file meanwhile calls the old open or the new one, both
            // > correct for what it opens.
            vfs.pointee.xOpen = { vfs, name, file, flags, outFlags in
                DocumentVFS.open(name, file, flags, outFlags, named: false) { name, file, flags, outFlags in
                    DefaultVFS.open(in: vfs!, name, file, flags, outFlags)
                }
            }
            return SQLITE_OK
        }
    }

    /// Opens a file that is not a document with `target`, a default VFS, by its own `xOpen`: never the interposed
    /// one, so nothing is classified twice.
    static func open(in target: UnsafeMutablePointer<sqlite3_vfs>, _ name: sqlite3_filename?,
                     _ file: UnsafeMutablePointer<sqlite3_file>?, _ flags: Int32,
                     _ outFlags: UnsafeMutablePointer<Int32>?) -> Int32 {
        if let interposed = interposition.withLock({ $0 }), interposed.vfs == target {
            return interposed.open(target, name, file, flags, outFlags)
        }
        return target.pointee.xOpen(target, name, file, flags, outFlags)
    }

    /// Serves the document `db`'s main database already is, when the host opened the path before it loaded the
    /// extension into the connection (the sqlite3 shell with a path and `.load`, sqlite-utils' `--load-extension`): the
    /// default VFS opened the bundle as a plain file, and the first read would say "file is not a database".
    ///
    /// Done only when that file is the default VFS's (interposed above), open, and held by no transaction: the
    /// connection has then read at most the 100-byte header, which SQLite reads again with page 1 (a page size it
    /// guessed from the zip's bytes is corrected there), and its page cache is checked against the header's change
    /// counter at the next read. The default VFS's file is closed, and the same memory (the default VFS's files are
    /// larger) becomes a store file. Anything else leaves the connection as it is.
    static func adoptMainDatabase(of db: OpaquePointer?) {
        guard let db, let interposed = interposition.withLock({ $0 }) else { return }
        var vfs: UnsafeMutablePointer<sqlite3_vfs>?
        guard let file = md_idle_main_file(db, &vfs), vfs == interposed.vfs,
              let name = md_main_filename(db), name.pointee != 0 else { return }
        let path = String(cString: name)
        guard DocumentVFS.Kind(of: path) == .bundle else { return }
        let cacheSize = DocumentVFS.cacheSize(md_uri_int64(name, "segment_cache", 0))
        // > Not immutable: SQLite made its pager for a lockable file; writes reach the lock and are refused there.
        switch DocumentVFS.open(FilePath(path), cacheSize: cacheSize, writable: true) {
        case .success(let slot):
            _ = file.pointee.pMethods.pointee.xClose(file)
            StoreFileMethods.clear(file)
            StoreFileMethods.attach(slot, to: file)
        case .failure(let refusal):
            ExtensionLog.write(refusal.code, refusal.message)
        }
    }
}
