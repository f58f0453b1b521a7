#ifndef CMDZSQLITE_H
#define CMDZSQLITE_H

// The SQLite binding the reading core (MDZCore) is written against: SQLite's types, the few calls its VFS code makes
// (`md_*`), the structures of the files its VFSs open, and the extended result codes Swift cannot import. Only
// declarations: each product links one definition of the calls, the library CMDZLinkedSQLite (the SQLite it links,
// GRDB's), the `mdzvfs` extension CMDZExtension (the host's `sqlite3_api_routines`), so the same Swift serves both.
#include <sqlite3.h>

#define MD_HIDDEN __attribute__((visibility("hidden")))

MD_HIDDEN sqlite3_vfs *md_vfs_find(const char *name);
MD_HIDDEN int md_vfs_register(sqlite3_vfs *vfs, int makeDefault);
MD_HIDDEN const char *md_uri_parameter(sqlite3_filename name, const char *parameter);
MD_HIDDEN sqlite3_int64 md_uri_int64(sqlite3_filename name, const char *parameter, sqlite3_int64 fallback);
/// `sqlite3_log(code, "%s", message)`: SQLite's error log (the shell prints it after `.log stderr`).
MD_HIDDEN void md_log(int code, const char *message);

// A store file served read-only from a bundle: SQLite's base structure, then the Swift object that serves its bytes
// (retained from xOpen to xClose).
typedef struct md_bundle_file {
    sqlite3_file base;
    void *store;
} md_bundle_file;

// A store file opened by the overlay VFS (a writable working copy over its bundle): SQLite's base structure, then
// the Swift object that holds its pages (retained from xOpen to xClose).
typedef struct md_overlay_file {
    sqlite3_file base;
    void *store;
} md_overlay_file;

// A file of SQLite's own in a working copy (the rollback journal, the WAL, an extracted store) opened through the
// working files' VFS: SQLite's base structure, the Swift object that reports its changes (retained from xOpen to
// xClose), then the default VFS's own structure for the file, which the methods hand every call to.
typedef struct md_working_file {
    sqlite3_file base;
    void *context;
    sqlite3_file *inner;
} md_working_file;

// Extended result codes are macros Swift cannot import (`(SQLITE_IOERR | (1<<8))`); defined in codes.c.
extern const int md_sqlite_ioerr_read;
extern const int md_sqlite_ioerr_short_read;
extern const int md_sqlite_ioerr_fstat;
extern const int md_sqlite_ioerr_write;
extern const int md_sqlite_ioerr_fsync;
extern const int md_sqlite_ioerr_truncate;
extern const int md_sqlite_ioerr_delete;
extern const int md_sqlite_ioerr_dir_fsync;
extern const int md_sqlite_ok_load_permanently;

#endif
