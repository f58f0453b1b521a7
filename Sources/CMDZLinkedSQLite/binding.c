#include "CMDZLinkedSQLite.h"

#include "../CMDZSQLite/calls.inc"
