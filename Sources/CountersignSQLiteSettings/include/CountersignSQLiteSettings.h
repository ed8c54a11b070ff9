#ifndef COUNTERSIGN_SQLITE_SETTINGS_H
#define COUNTERSIGN_SQLITE_SETTINGS_H

#include <sqlite3.h>

/// Turns on SQLite's query planner stability guarantee (SQLITE_DBCONFIG_ENABLE_QPSG) for the
/// connection `db`: a prepared statement keeps its plan whatever values are bound to it, so a
/// kept statement is never prepared again because of a bound value. Returns 1 when the setting
/// holds afterwards, 0 when it does not, -1 when SQLite refused the call.
///
/// `sqlite3_db_config` takes variable arguments, which Swift cannot call; this is the one
/// reason for this C target.
int countersign_sqlite_enable_qpsg(sqlite3 *db);

#endif
