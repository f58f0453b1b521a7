#ifndef CSQLITE_SHIM_H
#define CSQLITE_SHIM_H

// SQLite's C API, for the read-only VFS that serves a store's pages from its bundle (the same libsqlite3 GRDB
// uses, so a VFS registered here is seen by GRDB's connections). Declarations only.
#include <sqlite3.h>

// A file opened by the bundle VFS: SQLite's base structure, then the Swift object that serves its bytes (retained
// from xOpen to xClose).
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

// The SQLite calls the VFS code makes, under the names the `mdzvfs` extension's CMDZExtension gives them (there
// through the host's `sqlite3_api_routines`; here the linked SQLite's own): that code is written once for both.
static inline sqlite3_vfs *md_vfs_find(const char *name) { return sqlite3_vfs_find(name); }
static inline int md_vfs_register(sqlite3_vfs *vfs, int makeDefault) { return sqlite3_vfs_register(vfs, makeDefault); }
static inline sqlite3_int64 md_uri_int64(sqlite3_filename name, const char *parameter, sqlite3_int64 fallback) {
    return sqlite3_uri_int64(name, parameter, fallback);
}

// Extended result codes are macros Swift cannot import (`(SQLITE_IOERR | (1<<8))`).
static const int md_sqlite_ioerr_read = SQLITE_IOERR_READ;
static const int md_sqlite_ioerr_short_read = SQLITE_IOERR_SHORT_READ;
static const int md_sqlite_ioerr_fstat = SQLITE_IOERR_FSTAT;
static const int md_sqlite_ioerr_write = SQLITE_IOERR_WRITE;
static const int md_sqlite_ioerr_fsync = SQLITE_IOERR_FSYNC;
static const int md_sqlite_ioerr_truncate = SQLITE_IOERR_TRUNCATE;
static const int md_sqlite_ioerr_delete = SQLITE_IOERR_DELETE;
static const int md_sqlite_ioerr_dir_fsync = SQLITE_IOERR_DIR_FSYNC;

#endif
