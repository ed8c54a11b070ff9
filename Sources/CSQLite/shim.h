// The system's SQLite (Debian: libsqlite3-dev; the SDK's on Apple platforms), linked once: two
// copies of SQLite in one process do not see each other's POSIX locks on the same file.
#ifndef COUNTERSIGN_CSQLITE_SHIM_H
#define COUNTERSIGN_CSQLITE_SHIM_H

#include <sqlite3.h>

/// Process-wide settings, before SQLite's first use: no memory statistics (the system's SQLite
/// keeps them by default, behind a global mutex taken on every allocation) and the multi-thread
/// mode (each connection is used by one thread at a time; the server serializes them itself).
/// Returns SQLITE_OK, or SQLite's refusal when it was already in use.
///
/// `sqlite3_config` and `sqlite3_db_config` take variable arguments, which Swift cannot call:
/// these two wrappers are why they are here.
static inline int countersign_sqlite_configure(void) {
    int result = sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
    if (result != SQLITE_OK) {
        return result;
    }
    return sqlite3_config(SQLITE_CONFIG_MULTITHREAD);
}

/// Turns on SQLite's query planner stability guarantee (SQLITE_DBCONFIG_ENABLE_QPSG) for the
/// connection `db`: a prepared statement keeps its plan whatever values are bound to it, so a
/// kept statement is never prepared again because of a bound value. Returns 1 when the setting
/// holds afterwards, 0 when it does not, -1 when SQLite refused the call.
static inline int countersign_sqlite_enable_qpsg(sqlite3 *db) {
    int enabled = 0;
    if (sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_QPSG, 1, &enabled) != SQLITE_OK) {
        return -1;
    }
    return enabled;
}

#endif
