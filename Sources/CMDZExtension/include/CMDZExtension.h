#ifndef CMDZEXTENSION_H
#define CMDZEXTENSION_H

// SQLite's types for the `mdzvfs` loadable extension, and the few SQLite calls it makes, each through the
// `sqlite3_api_routines` table the host passes to the entry point (sqlite3ext.h's way): the extension never links
// SQLite and never calls a `sqlite3_*` symbol, so a host with its own SQLite (a static one, or another version) serves
// documents through the SQLite it uses. Swift cannot call sqlite3ext.h's macros, hence these functions.
//
// The same names are declared, calling the linked SQLite, by the library's CSQLite shim: the VFS code both build is
// written once against them.
#include <sqlite3.h>

#define MD_HIDDEN __attribute__((visibility("hidden")))

/// Keeps the host's routines for the calls below (SQLITE_EXTENSION_INIT2). First thing the entry point does. 0 when
/// another SQLite library of the same process (other routines) loaded the extension first: its VFS lives there.
MD_HIDDEN int md_use_host_api(const sqlite3_api_routines *api);

MD_HIDDEN sqlite3_vfs *md_vfs_find(const char *name);
MD_HIDDEN int md_vfs_register(sqlite3_vfs *vfs, int makeDefault);
MD_HIDDEN const char *md_uri_parameter(sqlite3_filename name, const char *parameter);
MD_HIDDEN sqlite3_int64 md_uri_int64(sqlite3_filename name, const char *parameter, sqlite3_int64 fallback);
/// `sqlite3_log(code, "%s", message)`: SQLite's error log (the shell prints it after `.log stderr`).
MD_HIDDEN void md_log(int code, const char *message);
/// `sqlite3_mprintf("%s", text)`: a string SQLite frees (an entry point's error message).
MD_HIDDEN char *md_sqlite_string(const char *text);
MD_HIDDEN const char *md_sqlite_version(void);
/// The connection's main database file, with its VFS in `vfs`, when it is open and no transaction holds it
/// (`sqlite3_txn_state`, SQLite 3.34 or later); 0 otherwise.
MD_HIDDEN sqlite3_file *md_idle_main_file(sqlite3 *db, sqlite3_vfs **vfs);
/// `sqlite3_db_filename(db, "main")`: its full path, which the URI parameter calls take; 0 or "" for none.
MD_HIDDEN sqlite3_filename md_main_filename(sqlite3 *db);

// A document opened by the `mdz` VFS: SQLite's base structure, then the Swift object that serves its bytes (retained
// from xOpen to xClose).
typedef struct md_bundle_file {
    sqlite3_file base;
    void *store;
} md_bundle_file;

// Extended result codes are macros Swift cannot import (`(SQLITE_IOERR | (1<<8))`).
static const int md_sqlite_ioerr_read = SQLITE_IOERR_READ;
static const int md_sqlite_ioerr_short_read = SQLITE_IOERR_SHORT_READ;
static const int md_sqlite_ioerr_fstat = SQLITE_IOERR_FSTAT;
static const int md_sqlite_ok_load_permanently = SQLITE_OK_LOAD_PERMANENTLY;

#endif
