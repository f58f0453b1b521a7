#include <sqlite3ext.h>
// Hidden: another extension loaded with RTLD_GLOBAL keeps its own `sqlite3_api`.
__attribute__((visibility("hidden"))) SQLITE_EXTENSION_INIT1
#include "CMDZExtension.h"

int md_use_host_api(const sqlite3_api_routines *api) {
    if (sqlite3_api != 0 && sqlite3_api != api) return 0;  // another SQLite of this process loaded it first
    SQLITE_EXTENSION_INIT2(api);
    return 1;
}

#include "../CMDZSQLite/calls.inc"
char *md_sqlite_string(const char *text) { return sqlite3_mprintf("%s", text); }
const char *md_sqlite_version(void) { return sqlite3_libversion(); }

sqlite3_file *md_idle_main_file(sqlite3 *db, sqlite3_vfs **vfs) {
    if (sqlite3_libversion_number() < 3034000) return 0;  // no sqlite3_txn_state: nothing proves the file unread
    if (sqlite3_txn_state(db, "main") != SQLITE_TXN_NONE) return 0;
    sqlite3_file *file = 0;
    if (sqlite3_file_control(db, "main", SQLITE_FCNTL_VFS_POINTER, vfs) != SQLITE_OK) return 0;
    if (sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &file) != SQLITE_OK) return 0;
    return file != 0 && file->pMethods != 0 ? file : 0;
}
sqlite3_filename md_main_filename(sqlite3 *db) { return sqlite3_db_filename(db, "main"); }
