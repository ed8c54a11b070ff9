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

/// Process-wide settings, before SQLite's first use: no memory statistics (the system's SQLite
/// keeps them by default, behind a global mutex taken on every allocation) and the
/// multi-thread mode (each connection is used by one thread at a time; the server serializes
/// them itself). Returns SQLITE_OK, or SQLite's refusal when it was already in use.
int countersign_sqlite_configure(void);

#endif
