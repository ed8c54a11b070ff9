#include "CountersignSQLiteSettings.h"

// sqlite-nio's copy of SQLite, its symbols prefixed `sqlite_nio_` (its header is not visible to
// a C target of another package, so the one function used is declared here as SQLite declares it).
int sqlite_nio_sqlite3_db_config(void *db, int op, ...);

// SQLITE_DBCONFIG_ENABLE_QPSG in sqlite3.h.
enum { countersign_dbconfig_enable_qpsg = 1007 };

int countersign_sqlite_enable_qpsg(void *db) {
    int enabled = 0;
    if (sqlite_nio_sqlite3_db_config(db, countersign_dbconfig_enable_qpsg, 1, &enabled) != 0) {
        return -1;
    }
    return enabled;
}
