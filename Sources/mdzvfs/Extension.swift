#if canImport(Glibc)
import Glibc
#endif
import CMDZExtension
import CMDZSQLite
import SystemPackage
@_spi(Core) import MDZCore

/// The extension's entry point, named after its file (`libmdzvfs.so`) as SQLite derives it: keeps the host's
/// routines, registers the `mdz` VFS, and stays loaded for the life of the process (`SQLITE_OK_LOAD_PERMANENTLY`), so
/// the VFS serves every connection opened after it, in any thread.
@_cdecl("sqlite3_mdzvfs_init")
public func sqlite3_mdzvfs_init(_ db: OpaquePointer?, _ errorMessage: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?,
                                _ api: OpaquePointer?) -> Int32 {
    load(db, errorMessage, api, asDefault: false)
}

/// The second entry point, for hosts that open a path and cannot name a VFS (Datasette, sqlite-utils, a program that
/// calls `sqlite3_open`): registers `mdz` and makes it the process's default VFS, so every database opened after it
/// passes through it. It serves a bundle (read-only) and hands everything else (a plain database, a new file, an
/// attached one, a `VACUUM INTO` target, journals, WALs and temporary files) to the previous default VFS, unchanged,
/// creation included. Loaded as `.load libmdzvfs sqlite3_mdzvfs_default_init`, `load_extension(path, entrypoint)`,
/// or Datasette's `--load-extension PATH:sqlite3_mdzvfs_default_init`.
@_cdecl("sqlite3_mdzvfs_default_init")
public func sqlite3_mdzvfs_default_init(_ db: OpaquePointer?,
                                        _ errorMessage: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?,
                                        _ api: OpaquePointer?) -> Int32 {
    load(db, errorMessage, api, asDefault: true)
}

private func load(_ db: OpaquePointer?, _ errorMessage: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?, _ api: OpaquePointer?,
                  asDefault: Bool) -> Int32 {
    guard let api else { return SQLITE_ERROR }
    guard md_use_host_api(api) != 0 else {
        errorMessage?.pointee = md_sqlite_string("mdz: another SQLite library of this process loaded the extension first; its connections read documents")
        return SQLITE_ERROR
    }
    var code = DocumentVFS.register()
    if code == SQLITE_OK && asDefault { code = DefaultVFS.interpose() }
    if code == SQLITE_OK && asDefault { DefaultVFS.adoptMainDatabase(of: db) }
    guard code == SQLITE_OK else {
        errorMessage?.pointee = md_sqlite_string("mdz: SQLite \(String(cString: md_sqlite_version())) refused the mdz VFS (error \(code))")
        return code
    }
    return md_sqlite_ok_load_permanently
}

/// Where the extension says why it refused a document: SQLite's error log (`sqlite3_log`; the `sqlite3` shell prints it
/// after `.log stderr`), and standard error too when the environment sets `MDZVFS_LOG=stderr` (Python and other hosts
/// show SQLite's error, "unable to open database file", without the reason).
enum ExtensionLog {
    static let howToEdit = "to change a document, open it with the ManagedDocument library or use `docconvert` (migrate, "
        + "or extract and convert)"

    private static let toStandardError: Bool = getenv("MDZVFS_LOG").map { String(cString: $0) == "stderr" } ?? false

    static func write(_ code: Int32, _ message: String) {
        md_log(code, message)
        if toStandardError {
            _ = try? FileDescriptor.standardError.writeAll((message + "\n").utf8)
        }
    }
}
