#include "CountersignSQLiteSettings.h"

int countersign_sqlite_configure(void) {
    int result = sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
    if (result != SQLITE_OK) {
        return result;
    }
    return sqlite3_config(SQLITE_CONFIG_MULTITHREAD);
}

int countersign_sqlite_enable_qpsg(sqlite3 *db) {
    int enabled = 0;
    if (sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_QPSG, 1, &enabled) != SQLITE_OK) {
        return -1;
    }
    return enabled;
}
