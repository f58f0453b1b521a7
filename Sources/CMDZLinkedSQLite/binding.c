#include "CMDZLinkedSQLite.h"

sqlite3_vfs *md_vfs_find(const char *name) { return sqlite3_vfs_find(name); }
int md_vfs_register(sqlite3_vfs *vfs, int makeDefault) { return sqlite3_vfs_register(vfs, makeDefault); }
const char *md_uri_parameter(sqlite3_filename name, const char *parameter) {
    return sqlite3_uri_parameter(name, parameter);
}
sqlite3_int64 md_uri_int64(sqlite3_filename name, const char *parameter, sqlite3_int64 fallback) {
    return sqlite3_uri_int64(name, parameter, fallback);
}
void md_log(int code, const char *message) { sqlite3_log(code, "%s", message); }
