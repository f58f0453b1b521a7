#if canImport(Glibc)
import Glibc
#endif
import CMDZExtension
import SystemPackage

/// The extension's entry point, named after its file (`libmdzvfs.so`) as SQLite derives it: keeps the host's
/// routines, registers the `mdz` VFS, and stays loaded for the life of the process (`SQLITE_OK_LOAD_PERMANENTLY`), so
/// the VFS serves every connection opened after it, in any thread.
@_cdecl("sqlite3_mdzvfs_init")
public func sqlite3_mdzvfs_init(_ db: OpaquePointer?, _ errorMessage: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?,
                                _ api: OpaquePointer?) -> Int32 {
    guard let api else { return SQLITE_ERROR }
    guard md_use_host_api(api) != 0 else {
        errorMessage?.pointee = md_sqlite_string("mdz: another SQLite library of this process loaded the extension first; its connections read documents")
        return SQLITE_ERROR
    }
    let code = DocumentVFS.register()
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
