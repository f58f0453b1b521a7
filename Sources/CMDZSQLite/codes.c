#include "CMDZSQLite.h"

const int md_sqlite_ioerr_read = SQLITE_IOERR_READ;
const int md_sqlite_ioerr_short_read = SQLITE_IOERR_SHORT_READ;
const int md_sqlite_ioerr_fstat = SQLITE_IOERR_FSTAT;
const int md_sqlite_ioerr_write = SQLITE_IOERR_WRITE;
const int md_sqlite_ioerr_fsync = SQLITE_IOERR_FSYNC;
const int md_sqlite_ioerr_truncate = SQLITE_IOERR_TRUNCATE;
const int md_sqlite_ioerr_delete = SQLITE_IOERR_DELETE;
const int md_sqlite_ioerr_dir_fsync = SQLITE_IOERR_DIR_FSYNC;
const int md_sqlite_ok_load_permanently = SQLITE_OK_LOAD_PERMANENTLY;
