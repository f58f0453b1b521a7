#if canImport(Glibc)
import Glibc
#endif
import CMDZSQLite  // SQLite's types and the `md_*` calls, bound by the product that links the core

/// The methods of a store file served read-only from a bundle: an `md_bundle_file` whose Swift object is a
/// ``StoreSlot``. Both VFSs that serve bundles use them: the library's ``BundleVFS`` and the `mdz` VFS of the
/// `mdzvfs` loadable extension.
///
/// Reads copy from the slot's source (a segment that fails its digest is a read error, recorded by the source, never
/// bytes); writes, truncation and write locks are refused as read-only (a write lock first tells the slot's
/// `refusingWrites`); read locks are no-ops, and an immutable slot says so (`SQLITE_IOCAP_IMMUTABLE`: SQLite then takes
/// no locks and looks for no journal or WAL).
@_spi(Core) public enum StoreFileMethods: Sendable {
    /// Makes `file` (allocated by SQLite, `szOsFile` bytes) a store file that reads `slot`, keeping the slot until
    /// SQLite closes the file.
    @_spi(Core) public static func attach(_ slot: StoreSlot, to file: UnsafeMutablePointer<sqlite3_file>) {
        let raw = UnsafeMutableRawPointer(file).assumingMemoryBound(to: md_bundle_file.self)
        raw.pointee.store = Unmanaged.passRetained(slot).toOpaque()
        raw.pointee.base.pMethods = UnsafePointer(table)
    }

    /// Clears `file` before it is opened: SQLite calls no method of a file whose open failed with `pMethods` nil.
    @_spi(Core) public static func clear(_ file: UnsafeMutablePointer<sqlite3_file>) {
        let raw = UnsafeMutableRawPointer(file).assumingMemoryBound(to: md_bundle_file.self)
        raw.pointee.base.pMethods = nil
        raw.pointee.store = nil
    }

    private static func slot(_ pointer: UnsafeMutablePointer<sqlite3_file>?) -> StoreSlot? {
        guard let raw = pointer.map(UnsafeMutableRawPointer.init)?.assumingMemoryBound(to: md_bundle_file.self),
              let slot = raw.pointee.store else { return nil }
        return Unmanaged<StoreSlot>.fromOpaque(slot).takeUnretainedValue()
    }

    /// Where a product says why a read failed, once per store, beside the I/O error SQLite returns (the extension: its
    /// log); `nil`, the library, which records the failure in the store and reports it with its own error.
    @_spi(Core) public static let readFailureLog = Protected<(@Sendable (String) -> Void)?>(nil)

    /// The methods, made once and never changed: SQLite reads them from any thread.
    private static var table: UnsafeMutablePointer<sqlite3_io_methods> { methodsTable.pointer }

    /// The methods' table, shared by every thread: written once, before any thread can see it, read only after.
    private struct MethodsTable: @unchecked Sendable {
        @_spi(Core) public let pointer: UnsafeMutablePointer<sqlite3_io_methods>
    }

    private static let methodsTable: MethodsTable = {
        let methods = UnsafeMutablePointer<sqlite3_io_methods>.allocate(capacity: 1)
        methods.initialize(to: sqlite3_io_methods())
        // > Version 3 for xFetch, which maps nothing: SQLite reads instead (a pager made for another VFS's file that
        // > maps pages keeps asking). No shared memory (xShmMap nil): SQLite never opens a WAL for it.
        methods.pointee.iVersion = 3
        methods.pointee.xFetch = { _, _, _, pointer in
            pointer?.pointee = nil
            return SQLITE_OK
        }
        methods.pointee.xUnfetch = { _, _, _ in SQLITE_OK }
        methods.pointee.xClose = { file in
            if let raw = file.map(UnsafeMutableRawPointer.init)?.assumingMemoryBound(to: md_bundle_file.self),
               let store = raw.pointee.store {
                Unmanaged<StoreSlot>.fromOpaque(store).release()
                raw.pointee.store = nil
            }
            return SQLITE_OK
        }
        methods.pointee.xRead = { file, buffer, count, offset in
            guard let store = StoreFileMethods.slot(file)?.source, let buffer else { return md_sqlite_ioerr_read }
            return read(store, into: buffer, count: Int(count), at: offset)
        }
        methods.pointee.xWrite = { _, _, _, _ in SQLITE_READONLY }
        methods.pointee.xTruncate = { _, _ in SQLITE_READONLY }
        methods.pointee.xSync = { _, _ in SQLITE_OK }
        methods.pointee.xFileSize = { file, size in
            guard let store = StoreFileMethods.slot(file)?.source else { return md_sqlite_ioerr_fstat }
            size?.pointee = store.size
            return SQLITE_OK
        }
        methods.pointee.xLock = { file, level in
            // > A lock above SHARED is asked for only to write (or to roll a hot journal back into the file).
            guard level > SQLITE_LOCK_SHARED else { return SQLITE_OK }
            StoreFileMethods.slot(file)?.refusingWrites?()
            return SQLITE_READONLY
        }
        methods.pointee.xUnlock = { _, _ in SQLITE_OK }
        methods.pointee.xCheckReservedLock = { _, result in
            result?.pointee = 0
            return SQLITE_OK
        }
        methods.pointee.xFileControl = { _, _, _ in SQLITE_NOTFOUND }
        methods.pointee.xSectorSize = { _ in 4096 }
        methods.pointee.xDeviceCharacteristics = { file in
            StoreFileMethods.slot(file)?.isImmutable == false ? 0 : SQLITE_IOCAP_IMMUTABLE
        }
        return MethodsTable(pointer: methods)
    }()

    /// `xRead`: `count` bytes at `offset`, zero-filled past the store's end (SQLite's short read); a failed read is
    /// recorded by the source and answered with an I/O error.
    private static func read(_ store: any ServedStore, into buffer: UnsafeMutableRawPointer, count: Int,
                             at offset: Int64) -> Int32 {
        do {
            let copied = try store.read(into: buffer, count: count, at: offset)
            guard copied == count else {
                (buffer + copied).initializeMemory(as: UInt8.self, repeating: 0, count: count - copied)
                return md_sqlite_ioerr_short_read
            }
            return SQLITE_OK
        } catch {
            let failure = error as? DocumentError
                ?? DocumentError(.ioFailure, path: store.origin, entry: BundleLayout.store,
                                 reason: "cannot read the store: \(error)")
            // > A host sees "disk I/O error": the product's log (the extension's) says which segment and why, once.
            if store.failure == nil, let log = readFailureLog.withLock({ $0 }) { log("mdz: \(failure)") }
            store.fail(failure)
            return md_sqlite_ioerr_read
        }
    }
}
