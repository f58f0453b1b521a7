#if canImport(Glibc)
import Glibc
#endif
import CMDZSQLite  // SQLite's types and the `md_*` calls, bound by the product that links the core

/// The part the package's VFSs (``BundleVFS``, ``OverlayVFS``, the extension's `mdz`) share: a `sqlite3_vfs` that hands everything but
/// opening files to the process's default VFS (its `pAppData`): deleting and probing files, full path names,
/// loading extensions (`xDlOpen`, `xDlError`, `xDlSym`, `xDlClose`: an app that enables extension loading on a
/// document's connection loads through them), randomness, sleep, time and the last OS error.
@_spi(Core) public enum DelegatingVFS: Sendable {
    /// The default VFS a delegating VFS hands its calls to.
    @_spi(Core)
    public static func fallback(_ vfs: UnsafeMutablePointer<sqlite3_vfs>?) -> UnsafeMutablePointer<sqlite3_vfs> {
        vfs!.pointee.pAppData.assumingMemoryBound(to: sqlite3_vfs.self)
    }

    /// Opens `name` with the default VFS: a file a delegating VFS does not serve itself (a temporary file; for the
    /// extension's VFS, a plain database).
    @_spi(Core) public static func openInFallback(_ vfs: UnsafeMutablePointer<sqlite3_vfs>?, _ name: sqlite3_filename?,
                               _ file: UnsafeMutablePointer<sqlite3_file>?, _ flags: Int32,
                               _ outFlags: UnsafeMutablePointer<Int32>?) -> Int32 {
        let fallback = fallback(vfs)
        return fallback.pointee.xOpen(fallback, name, file, flags, outFlags)
    }

    /// A new VFS named `name` (allocated for the life of the process, not yet registered) whose files take
    /// `fileSize` bytes (at least the default VFS's, whose files it also opens), and whose calls other than
    /// `xOpen` go to the default VFS; `nil` when there is no default VFS. The caller sets `xOpen`.
    @_spi(Core) public static func make(named name: String, fileSize: Int) -> UnsafeMutablePointer<sqlite3_vfs>? {
        guard let fallback = md_vfs_find(nil) else { return nil }
        let vfs = UnsafeMutablePointer<sqlite3_vfs>.allocate(capacity: 1)  // lives as long as the process
        vfs.initialize(to: sqlite3_vfs())
        vfs.pointee.iVersion = 2
        vfs.pointee.szOsFile = max(Int32(fileSize), fallback.pointee.szOsFile)
        vfs.pointee.mxPathname = fallback.pointee.mxPathname
        vfs.pointee.zName = UnsafePointer(strdup(name))
        vfs.pointee.pAppData = UnsafeMutableRawPointer(fallback)
        vfs.pointee.xDelete = { vfs, name, syncFolder in
            let fallback = DelegatingVFS.fallback(vfs)
            return fallback.pointee.xDelete(fallback, name, syncFolder)
        }
        vfs.pointee.xAccess = { vfs, name, flags, result in
            let fallback = DelegatingVFS.fallback(vfs)
            return fallback.pointee.xAccess(fallback, name, flags, result)
        }
        vfs.pointee.xFullPathname = { vfs, name, count, output in
            let fallback = DelegatingVFS.fallback(vfs)
            return fallback.pointee.xFullPathname(fallback, name, count, output)
        }
        vfs.pointee.xRandomness = { vfs, count, output in
            let fallback = DelegatingVFS.fallback(vfs)
            return fallback.pointee.xRandomness(fallback, count, output)
        }
        vfs.pointee.xSleep = { vfs, microseconds in
            let fallback = DelegatingVFS.fallback(vfs)
            return fallback.pointee.xSleep(fallback, microseconds)
        }
        vfs.pointee.xCurrentTime = { vfs, time in
            let fallback = DelegatingVFS.fallback(vfs)
            return fallback.pointee.xCurrentTime(fallback, time)
        }
        vfs.pointee.xDlOpen = { vfs, name in
            let fallback = DelegatingVFS.fallback(vfs)
            return fallback.pointee.xDlOpen(fallback, name)
        }
        vfs.pointee.xDlError = { vfs, count, output in
            let fallback = DelegatingVFS.fallback(vfs)
            fallback.pointee.xDlError(fallback, count, output)
        }
        vfs.pointee.xDlSym = { vfs, handle, symbol in
            let fallback = DelegatingVFS.fallback(vfs)
            return fallback.pointee.xDlSym(fallback, handle, symbol)
        }
        vfs.pointee.xDlClose = { vfs, handle in
            let fallback = DelegatingVFS.fallback(vfs)
            fallback.pointee.xDlClose(fallback, handle)
        }
        vfs.pointee.xGetLastError = { vfs, count, output in
            let fallback = DelegatingVFS.fallback(vfs)
            return fallback.pointee.xGetLastError?(fallback, count, output) ?? 0
        }
        vfs.pointee.xCurrentTimeInt64 = { vfs, time in
            let fallback = DelegatingVFS.fallback(vfs)
            return fallback.pointee.xCurrentTimeInt64(fallback, time)
        }
        return vfs
    }
}
