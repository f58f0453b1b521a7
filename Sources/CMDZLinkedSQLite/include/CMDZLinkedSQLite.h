#ifndef CMDZLINKEDSQLITE_H
#define CMDZLINKEDSQLITE_H

// The library's definition of the core's SQLite binding (CMDZSQLite.h): the SQLite the process links, the one GRDB
// uses, so that a VFS registered by the core is seen by GRDB's connections. Nothing to declare beyond it.
#include "CMDZSQLite.h"

#endif
