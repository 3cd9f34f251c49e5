#ifndef CHAUL_SQLITE_H
#define CHAUL_SQLITE_H

// Our own declarations of the few SQLite functions `haul serve` uses. libsqlite3 is dlopen()ed
// when the daemon first opens its store, so no other haul command loads it and building needs
// no headers (docs/serve.md).

#include <stddef.h>
#include <stdint.h>

typedef struct haul_sqlite haul_sqlite;
typedef struct haul_sqlite_stmt haul_sqlite_stmt;

// Result codes and column types (sqlite3.h's values).
enum {
    HAUL_SQLITE_OK = 0,
    HAUL_SQLITE_BUSY = 5,
    HAUL_SQLITE_ROW = 100,
    HAUL_SQLITE_DONE = 101,
    HAUL_SQLITE_INTEGER = 1,
    HAUL_SQLITE_FLOAT = 2,
    HAUL_SQLITE_TEXT = 3,
    HAUL_SQLITE_BLOB = 4,
    HAUL_SQLITE_NULL = 5,
    // Open flags: read-write, create, no mutex (one owner per connection), no symlink.
    HAUL_SQLITE_OPEN_READWRITE = 0x00000002,
    HAUL_SQLITE_OPEN_CREATE = 0x00000004,
    HAUL_SQLITE_OPEN_NOMUTEX = 0x00008000,
    HAUL_SQLITE_OPEN_NOFOLLOW = 0x01000000,
};

/// Loads libsqlite3 once; 0 on success, else -1 with the reason in `err`.
int haul_sqlite_load(char *err, size_t errlen);
const char *haul_sqlite_libversion(void);

int haul_sqlite_open(const char *path, int flags, haul_sqlite **db);
int haul_sqlite_close(haul_sqlite *db);
const char *haul_sqlite_errmsg(haul_sqlite *db);
int haul_sqlite_busy_timeout(haul_sqlite *db, int ms);
int haul_sqlite_exec(haul_sqlite *db, const char *sql);
int haul_sqlite_prepare(haul_sqlite *db, const char *sql, haul_sqlite_stmt **stmt);
int haul_sqlite_step(haul_sqlite_stmt *stmt);
int haul_sqlite_reset(haul_sqlite_stmt *stmt);
int haul_sqlite_finalize(haul_sqlite_stmt *stmt);
int haul_sqlite_bind_int64(haul_sqlite_stmt *stmt, int index, int64_t value);
int haul_sqlite_bind_double(haul_sqlite_stmt *stmt, int index, double value);
/// Binds `length` bytes of UTF-8 text, copied by SQLite (SQLITE_TRANSIENT).
int haul_sqlite_bind_text(haul_sqlite_stmt *stmt, int index, const char *text, int length);
int haul_sqlite_bind_null(haul_sqlite_stmt *stmt, int index);
int haul_sqlite_column_count(haul_sqlite_stmt *stmt);
int haul_sqlite_column_type(haul_sqlite_stmt *stmt, int column);
int64_t haul_sqlite_column_int64(haul_sqlite_stmt *stmt, int column);
double haul_sqlite_column_double(haul_sqlite_stmt *stmt, int column);
/// The column's text (valid until the next step, reset or finalize) and its length in bytes.
const unsigned char *haul_sqlite_column_text(haul_sqlite_stmt *stmt, int column, int *length);
int64_t haul_sqlite_changes(haul_sqlite *db);
int64_t haul_sqlite_last_insert_rowid(haul_sqlite *db);

#endif
