#include "CountersignSQLiteSettings.h"

int countersign_sqlite_enable_qpsg(sqlite3 *db) {
    int enabled = 0;
    if (sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_QPSG, 1, &enabled) != SQLITE_OK) {
        return -1;
    }
    return enabled;
}
