#ifndef CMDZEXTENSION_H
#define CMDZEXTENSION_H

// The `mdzvfs` loadable extension's definition of the core's SQLite binding (CMDZSQLite.h), every call through the
// `sqlite3_api_routines` table the host passes to the entry point (sqlite3ext.h's way): the extension never links
// SQLite and never calls a `sqlite3_*` symbol, so a host with its own SQLite (a static one, or another version) serves
// documents through the SQLite it uses. Swift cannot call sqlite3ext.h's macros, hence these functions. Below, the
// calls only the extension makes.
#include "CMDZSQLite.h"

/// Keeps the host's routines for the calls below (SQLITE_EXTENSION_INIT2). First thing the entry point does. 0 when
/// another SQLite library of the same process (other routines) loaded the extension first: its VFS lives there.
MD_HIDDEN int md_use_host_api(const sqlite3_api_routines *api);

/// `sqlite3_mprintf("%s", text)`: a string SQLite frees (an entry point's error message).
MD_HIDDEN char *md_sqlite_string(const char *text);
MD_HIDDEN const char *md_sqlite_version(void);
/// The connection's main database file, with its VFS in `vfs`, when it is open and no transaction holds it
/// (`sqlite3_txn_state`, SQLite 3.34 or later); 0 otherwise.
MD_HIDDEN sqlite3_file *md_idle_main_file(sqlite3 *db, sqlite3_vfs **vfs);
/// `sqlite3_db_filename(db, "main")`: its full path, which the URI parameter calls take; 0 or "" for none.
MD_HIDDEN sqlite3_filename md_main_filename(sqlite3 *db);

#endif
