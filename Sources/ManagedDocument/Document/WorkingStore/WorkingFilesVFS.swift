#if canImport(Glibc)
import Glibc
#endif
import CMDZSQLite
import GRDBSQLite  // sqlite3.h's types are attributed to the first module that includes it: GRDB's
import SystemPackage
@_spi(Core) import MDZCore

/// SQLite's own files in a working copy (the rollback journal, the WAL, a super-journal, an extracted store), served
/// by the process's default VFS through a thin layer of the library's, for two things (FORMAT.md 16.2, "Durability"):
///
/// - **The journal's removal is durable before a commit is acknowledged.** SQLite ends a transaction in `DELETE`
///   mode by unlinking its journal, and flushes the journal's folder after that only under `synchronous = EXTRA`;
///   after a power cut that lost the unlink, the journal is hot again and SQLite rolls the last acknowledged commit
///   back. `xDelete` here always flushes the folder after the unlink, whatever `synchronous` says.
/// - **Every change SQLite makes is seen.** Each write, truncation, flush, file made and file removed goes through
///   ``FileIO`` like the library's own (``FileIO/observing(_:_:)``), so the crash-state recorder builds the states a
///   power cut leaves of SQLite's files too, and a test can fail any of them (`ENOSPC` becomes `SQLITE_FULL`).
///
/// Each file is opened by the default VFS into the room after an ``md_working_file`` header, and its methods
/// hand every call to the default VFS's methods for it (shared memory and memory mapping included), reporting the
/// changes around them. The default VFS flushes a journal's or WAL's folder at the file's first sync when it made
/// the file (`UNIXFILE_DIRSYNC` in SQLite's `os_unix.c`): that flush is reported after the sync that did it.
///
/// Used by ``OverlayVFS`` for every file but the overlay store itself, and on its own (as `vfs=` of the URI,
/// ``uri(of:)``) for an extracted working store.
enum WorkingFilesVFS {
    static let name = "managed-document-working"

    /// Registers the VFS (once); whether SQLite accepted it.
    static let isRegistered: Bool = register()

    /// The bytes a file of this VFS takes: the header, then the default VFS's own file.
    static var fileSize: Int { innerOffset + Int(md_vfs_find(nil)?.pointee.szOsFile ?? 0) }

    /// Where the default VFS's file starts after the header (8-byte aligned).
    private static let innerOffset = (MemoryLayout<md_working_file>.size + 7) & ~7

    /// The `file:` URI that opens `store` through this VFS (read-write, as GRDB opens it).
    static func uri(of store: FilePath) -> String {
        guard isRegistered else { return store.string }
        return "file:\(uriPath(store.string))?vfs=\(name)"
    }

    /// A path as a URI's path: every byte but letters, digits and `/ - . _ ~` percent-encoded (SQLite decodes
    /// `%HH` in a URI's path; `?` and `#` would end it).
    static func uriPath(_ path: String) -> String {
        var result = ""
        for byte in path.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "/"), UInt8(ascii: "-"), UInt8(ascii: "."),
                 UInt8(ascii: "_"), UInt8(ascii: "~"):
                result.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                result += "%" + (byte < 16 ? "0" : "") + String(byte, radix: 16, uppercase: true)
            }
        }
        return result
    }

    /// What a file opened here knows of itself: its name, and whether its first sync flushes its folder too.
    final class Context: @unchecked Sendable {  // SQLite calls one file's methods under its connection's mutex
        let path: FilePath
        var flushesFolderAtFirstSync: Bool

        init(path: FilePath, flushesFolderAtFirstSync: Bool) {
            self.path = path
            self.flushesFolderAtFirstSync = flushesFolderAtFirstSync
        }
    }

    /// The SQLite result of a change the observer failed with `error`: `SQLITE_FULL` for `ENOSPC`, `failure` else.
    private static func result(of error: any Error, failure: Int32) -> Int32 {
        FileIO.errno(of: error) == .noSpace ? SQLITE_FULL : failure
    }

    /// The context and the default VFS's file of a file opened here.
    private static func parts(_ file: UnsafeMutablePointer<sqlite3_file>?)
    -> (context: Context, inner: UnsafeMutablePointer<sqlite3_file>, methods: sqlite3_io_methods)? {
        guard let raw = file.map(UnsafeMutableRawPointer.init)?.assumingMemoryBound(to: md_working_file.self),
              let context = raw.pointee.context, let inner = raw.pointee.inner,
              let methods = inner.pointee.pMethods else { return nil }
        return (Unmanaged<Context>.fromOpaque(context).takeUnretainedValue(), inner, methods.pointee)
    }

    /// `xOpen`: a named main database, journal, super-journal or WAL through the layer; anything else (a temporary
    /// file) straight from the default VFS.
    static func open(_ vfs: UnsafeMutablePointer<sqlite3_vfs>?, _ name: sqlite3_filename?,
                     _ file: UnsafeMutablePointer<sqlite3_file>?, _ flags: Int32,
                     _ outFlags: UnsafeMutablePointer<Int32>?) -> Int32 {
        let kind = flags & (SQLITE_OPEN_MAIN_DB | SQLITE_OPEN_MAIN_JOURNAL | SQLITE_OPEN_SUPER_JOURNAL | SQLITE_OPEN_WAL)
        guard let name, let file, kind != 0 else { return DelegatingVFS.openInFallback(vfs, name, file, flags, outFlags) }
        let fallback = DelegatingVFS.fallback(vfs)
        let raw = UnsafeMutableRawPointer(file)
        let header = raw.assumingMemoryBound(to: md_working_file.self)
        let inner = (raw + innerOffset).assumingMemoryBound(to: sqlite3_file.self)
        header.pointee.base.pMethods = nil
        header.pointee.context = nil
        header.pointee.inner = inner
        let path = FilePath(platformString: name)
        let creates = flags & SQLITE_OPEN_CREATE != 0
        let opened: Int32
        do {
            // > Only an open that may make the file is a change (`O_CREAT`); any other is handed on unreported.
            let open = { fallback.pointee.xOpen(fallback, name, inner, flags, outFlags) }
            opened = creates ? try FileIO.observing(FileIO.Event(kind: .create, path: path), open) : open()
        } catch {
            return result(of: error, failure: SQLITE_CANTOPEN)
        }
        guard opened == SQLITE_OK, let methods = inner.pointee.pMethods else {
            // > A default VFS that failed but left methods set wants its xClose called.
            if let methods = inner.pointee.pMethods { _ = methods.pointee.xClose?(inner) }
            return opened == SQLITE_OK ? SQLITE_CANTOPEN : opened
        }
        let context = Context(path: path, flushesFolderAtFirstSync: creates && kind != SQLITE_OPEN_MAIN_DB)
        header.pointee.context = Unmanaged.passRetained(context).toOpaque()
        header.pointee.base.pMethods = UnsafePointer(table(version: methods.pointee.iVersion))
        return SQLITE_OK
    }

    /// `xDelete`: the default VFS's unlink, then a flush of the folder whatever `synchronous` asked for (the
    /// journal's removal is what makes a `DELETE`-mode commit final).
    static func delete(_ vfs: UnsafeMutablePointer<sqlite3_vfs>?, _ name: UnsafePointer<CChar>?,
                       _ syncFolder: Int32) -> Int32 {
        let fallback = DelegatingVFS.fallback(vfs)
        guard let name else { return fallback.pointee.xDelete(fallback, name, syncFolder) }
        let path = FilePath(platformString: name)
        do {
            let removed = try FileIO.observing(FileIO.Event(kind: .unlink, path: path)) {
                fallback.pointee.xDelete(fallback, name, 0)
            }
            guard removed == SQLITE_OK else { return removed }
        } catch {
            return result(of: error, failure: md_sqlite_ioerr_delete)
        }
        do {
            try FileSystem.syncDirectory(path.removingLastComponent())
        } catch {
            return result(of: (error as? DocumentError)?.underlyingError ?? error, failure: md_sqlite_ioerr_dir_fsync)
        }
        return SQLITE_OK
    }

    /// Registers the VFS beside the default one; whether SQLite accepted it.
    private static func register() -> Bool {
        guard let vfs = DelegatingVFS.make(named: name, fileSize: fileSize) else { return false }
        vfs.pointee.xOpen = { vfs, name, file, flags, outFlags in WorkingFilesVFS.open(vfs, name, file, flags, outFlags) }
        vfs.pointee.xDelete = { vfs, name, syncFolder in WorkingFilesVFS.delete(vfs, name, syncFolder) }
        return md_vfs_register(vfs, 0) == SQLITE_OK
    }
}

// MARK: - The methods

extension WorkingFilesVFS {
    /// The methods' tables of versions 1 to 3 (the default VFS's files' version is kept, so SQLite asks for shared
    /// memory and memory mapping exactly when the default VFS offers them), made once and never changed.
    private struct Tables: @unchecked Sendable {
        let tables: [UnsafeMutablePointer<sqlite3_io_methods>]
    }

    private static let tables = Tables(tables: (1...3).map(makeTable))

    private static func table(version: Int32) -> UnsafeMutablePointer<sqlite3_io_methods> {
        tables.tables[Int(min(max(version, 1), 3)) - 1]
    }

    // The closures take no context: SQLite calls them through C function pointers.
    private static func makeTable(version: Int32) -> UnsafeMutablePointer<sqlite3_io_methods> {
        let table = UnsafeMutablePointer<sqlite3_io_methods>.allocate(capacity: 1)  // lives as long as the process
        table.initialize(to: sqlite3_io_methods())
        table.pointee.iVersion = version
        setChangingMethods(table)
        setOtherMethods(table)
        if version >= 2 { setSharedMemoryMethods(table) }
        if version >= 3 { setMappingMethods(table) }
        return table
    }

    /// The methods that change the file, each reported through ``FileIO``, and `xClose`.
    private static func setChangingMethods(_ table: UnsafeMutablePointer<sqlite3_io_methods>) {
        table.pointee.xClose = { file in
            guard let raw = file.map(UnsafeMutableRawPointer.init)?.assumingMemoryBound(to: md_working_file.self),
                  let inner = raw.pointee.inner else { return SQLITE_OK }
            let closed = inner.pointee.pMethods?.pointee.xClose?(inner) ?? SQLITE_OK
            if let context = raw.pointee.context { Unmanaged<Context>.fromOpaque(context).release() }
            raw.pointee.context = nil
            return closed
        }
        table.pointee.xWrite = { file, buffer, count, offset in
            guard let (context, inner, methods) = WorkingFilesVFS.parts(file) else { return md_sqlite_ioerr_write }
            let event = FileIO.Event(kind: .write, path: context.path, offset: offset,
                                     bytes: UnsafeRawBufferPointer(start: buffer, count: Int(max(0, count))))
            do { return try FileIO.observing(event) { methods.xWrite!(inner, buffer, count, offset) } } catch {
                return WorkingFilesVFS.result(of: error, failure: md_sqlite_ioerr_write)
            }
        }
        table.pointee.xTruncate = { file, size in
            guard let (context, inner, methods) = WorkingFilesVFS.parts(file) else { return md_sqlite_ioerr_truncate }
            do {
                return try FileIO.observing(FileIO.Event(kind: .truncate, path: context.path, size: size)) {
                    methods.xTruncate!(inner, size)
                }
            } catch {
                return WorkingFilesVFS.result(of: error, failure: md_sqlite_ioerr_truncate)
            }
        }
        table.pointee.xSync = { file, flags in
            guard let (context, inner, methods) = WorkingFilesVFS.parts(file) else { return md_sqlite_ioerr_fsync }
            let kind: FileIO.Event.Kind = flags & SQLITE_SYNC_DATAONLY != 0 ? .dataSync : .sync
            let synced: Int32
            do {
                synced = try FileIO.observing(FileIO.Event(kind: kind, path: context.path)) { methods.xSync!(inner, flags) }
            } catch {
                return WorkingFilesVFS.result(of: error, failure: md_sqlite_ioerr_fsync)
            }
            if synced == SQLITE_OK && context.flushesFolderAtFirstSync {
                // > The default VFS flushed the folder of the file it made, in that same sync.
                context.flushesFolderAtFirstSync = false
                FileIO.didPerform(FileIO.Event(kind: .syncDirectory, path: context.path.removingLastComponent()))
            }
            return synced
        }
    }

    /// The methods handed to the default VFS's file as they are: reads, size, locks, controls, characteristics.
    private static func setOtherMethods(_ table: UnsafeMutablePointer<sqlite3_io_methods>) {
        table.pointee.xRead = { file, buffer, count, offset in
            guard let (_, inner, methods) = WorkingFilesVFS.parts(file) else { return md_sqlite_ioerr_read }
            return methods.xRead!(inner, buffer, count, offset)
        }
        table.pointee.xFileSize = { file, size in
            guard let (_, inner, methods) = WorkingFilesVFS.parts(file) else { return md_sqlite_ioerr_fstat }
            return methods.xFileSize!(inner, size)
        }
        table.pointee.xLock = { file, level in
            guard let (_, inner, methods) = WorkingFilesVFS.parts(file) else { return SQLITE_IOERR }
            return methods.xLock!(inner, level)
        }
        table.pointee.xUnlock = { file, level in
            guard let (_, inner, methods) = WorkingFilesVFS.parts(file) else { return SQLITE_IOERR }
            return methods.xUnlock!(inner, level)
        }
        table.pointee.xCheckReservedLock = { file, result in
            guard let (_, inner, methods) = WorkingFilesVFS.parts(file) else { return SQLITE_IOERR }
            return methods.xCheckReservedLock!(inner, result)
        }
        table.pointee.xFileControl = { file, operation, argument in
            guard let (_, inner, methods) = WorkingFilesVFS.parts(file) else { return SQLITE_NOTFOUND }
            return methods.xFileControl!(inner, operation, argument)
        }
        table.pointee.xSectorSize = { file in
            guard let (_, inner, methods) = WorkingFilesVFS.parts(file) else { return 4096 }
            return methods.xSectorSize!(inner)
        }
        table.pointee.xDeviceCharacteristics = { file in
            guard let (_, inner, methods) = WorkingFilesVFS.parts(file) else { return 0 }
            return methods.xDeviceCharacteristics!(inner)
        }
    }

    /// Shared memory (version 2): the WAL index, handed to the default VFS's file.
    private static func setSharedMemoryMethods(_ table: UnsafeMutablePointer<sqlite3_io_methods>) {
        table.pointee.xShmMap = { file, region, size, extend, pointer in
            guard let (_, inner, methods) = WorkingFilesVFS.parts(file), let call = methods.xShmMap else { return SQLITE_IOERR }
            return call(inner, region, size, extend, pointer)
        }
        table.pointee.xShmLock = { file, offset, count, flags in
            guard let (_, inner, methods) = WorkingFilesVFS.parts(file), let call = methods.xShmLock else { return SQLITE_IOERR }
            return call(inner, offset, count, flags)
        }
        table.pointee.xShmBarrier = { file in
            guard let (_, inner, methods) = WorkingFilesVFS.parts(file) else { return }
            methods.xShmBarrier?(inner)
        }
        table.pointee.xShmUnmap = { file, delete in
            guard let (_, inner, methods) = WorkingFilesVFS.parts(file), let call = methods.xShmUnmap else { return SQLITE_OK }
            return call(inner, delete)
        }
    }

    /// Memory mapping (version 3), handed to the default VFS's file.
    private static func setMappingMethods(_ table: UnsafeMutablePointer<sqlite3_io_methods>) {
        table.pointee.xFetch = { file, offset, count, pointer in
            guard let (_, inner, methods) = WorkingFilesVFS.parts(file), let call = methods.xFetch else {
                pointer?.pointee = nil
                return SQLITE_OK
            }
            return call(inner, offset, count, pointer)
        }
        table.pointee.xUnfetch = { file, offset, pointer in
            guard let (_, inner, methods) = WorkingFilesVFS.parts(file), let call = methods.xUnfetch else { return SQLITE_OK }
            return call(inner, offset, pointer)
        }
    }
}
