#include "CHaulSQLite.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

static struct {
    const char *(*libversion)(void);
    int (*open_v2)(const char *, haul_sqlite **, int, const char *);
    int (*close_v2)(haul_sqlite *);
    const char *(*errmsg)(haul_sqlite *);
    int (*busy_timeout)(haul_sqlite *, int);
    int (*exec)(haul_sqlite *, const char *, void *, void *, char **);
    int (*prepare_v2)(haul_sqlite *, const char *, int, haul_sqlite_stmt **, const char **);
    int (*step)(haul_sqlite_stmt *);
    int (*reset)(haul_sqlite_stmt *);
    int (*finalize)(haul_sqlite_stmt *);
    int (*bind_int64)(haul_sqlite_stmt *, int, int64_t);
    int (*bind_double)(haul_sqlite_stmt *, int, double);
    int (*bind_text)(haul_sqlite_stmt *, int, const char *, int, void (*)(void *));
    int (*bind_null)(haul_sqlite_stmt *, int);
    int (*column_count)(haul_sqlite_stmt *);
    int (*column_type)(haul_sqlite_stmt *, int);
    int64_t (*column_int64)(haul_sqlite_stmt *, int);
    double (*column_double)(haul_sqlite_stmt *, int);
    const unsigned char *(*column_text)(haul_sqlite_stmt *, int);
    int (*column_bytes)(haul_sqlite_stmt *, int);
    int64_t (*changes64)(haul_sqlite *);
    int64_t (*last_insert_rowid)(haul_sqlite *);
} api;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_error[512];
static int load_status = -1;

#define RESOLVE(field, name)                                                                     \
    do {                                                                                         \
        *(void **)(&api.field) = dlsym(lib, name);                                               \
        if (!api.field) {                                                                        \
            snprintf(load_error, sizeof load_error, "libsqlite3 lacks %s (need 3.37 or newer)", name); \
            return;                                                                              \
        }                                                                                        \
    } while (0)

static void load(void) {
    static const char *candidates[] = {
#ifdef __APPLE__
        "libsqlite3.dylib", "/usr/lib/libsqlite3.dylib",
#else
        "libsqlite3.so.0", "libsqlite3.so",
#endif
        NULL};
    void *lib = NULL;
    for (int i = 0; candidates[i] && !lib; i++) lib = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(load_error, sizeof load_error, "cannot load libsqlite3: %s", e ? e : "not found");
        return;
    }
    RESOLVE(libversion, "sqlite3_libversion");
    RESOLVE(open_v2, "sqlite3_open_v2");
    RESOLVE(close_v2, "sqlite3_close_v2");
    RESOLVE(errmsg, "sqlite3_errmsg");
    RESOLVE(busy_timeout, "sqlite3_busy_timeout");
    RESOLVE(exec, "sqlite3_exec");
    RESOLVE(prepare_v2, "sqlite3_prepare_v2");
    RESOLVE(step, "sqlite3_step");
    RESOLVE(reset, "sqlite3_reset");
    RESOLVE(finalize, "sqlite3_finalize");
    RESOLVE(bind_int64, "sqlite3_bind_int64");
    RESOLVE(bind_double, "sqlite3_bind_double");
    RESOLVE(bind_text, "sqlite3_bind_text");
    RESOLVE(bind_null, "sqlite3_bind_null");
    RESOLVE(column_count, "sqlite3_column_count");
    RESOLVE(column_type, "sqlite3_column_type");
    RESOLVE(column_int64, "sqlite3_column_int64");
    RESOLVE(column_double, "sqlite3_column_double");
    RESOLVE(column_text, "sqlite3_column_text");
    RESOLVE(column_bytes, "sqlite3_column_bytes");
    RESOLVE(changes64, "sqlite3_changes64");
    RESOLVE(last_insert_rowid, "sqlite3_last_insert_rowid");
    load_status = 0;
}

int haul_sqlite_load(char *err, size_t errlen) {
    pthread_once(&load_once, load);
    if (load_status != 0 && err && errlen) snprintf(err, errlen, "%s", load_error);
    return load_status;
}

const char *haul_sqlite_libversion(void) { return api.libversion(); }
int haul_sqlite_open(const char *path, int flags, haul_sqlite **db) { return api.open_v2(path, db, flags, NULL); }
int haul_sqlite_close(haul_sqlite *db) { return api.close_v2(db); }
const char *haul_sqlite_errmsg(haul_sqlite *db) { return api.errmsg(db); }
int haul_sqlite_busy_timeout(haul_sqlite *db, int ms) { return api.busy_timeout(db, ms); }
int haul_sqlite_exec(haul_sqlite *db, const char *sql) { return api.exec(db, sql, NULL, NULL, NULL); }
int haul_sqlite_prepare(haul_sqlite *db, const char *sql, haul_sqlite_stmt **stmt) {
    return api.prepare_v2(db, sql, -1, stmt, NULL);
}
int haul_sqlite_step(haul_sqlite_stmt *stmt) { return api.step(stmt); }
int haul_sqlite_reset(haul_sqlite_stmt *stmt) { return api.reset(stmt); }
int haul_sqlite_finalize(haul_sqlite_stmt *stmt) { return api.finalize(stmt); }
int haul_sqlite_bind_int64(haul_sqlite_stmt *stmt, int i, int64_t v) { return api.bind_int64(stmt, i, v); }
int haul_sqlite_bind_double(haul_sqlite_stmt *stmt, int i, double v) { return api.bind_double(stmt, i, v); }
int haul_sqlite_bind_text(haul_sqlite_stmt *stmt, int i, const char *text, int length) {
    return api.bind_text(stmt, i, text, length, (void (*)(void *))(intptr_t)-1);  // SQLITE_TRANSIENT
}
int haul_sqlite_bind_null(haul_sqlite_stmt *stmt, int i) { return api.bind_null(stmt, i); }
int haul_sqlite_column_count(haul_sqlite_stmt *stmt) { return api.column_count(stmt); }
int haul_sqlite_column_type(haul_sqlite_stmt *stmt, int c) { return api.column_type(stmt, c); }
int64_t haul_sqlite_column_int64(haul_sqlite_stmt *stmt, int c) { return api.column_int64(stmt, c); }
double haul_sqlite_column_double(haul_sqlite_stmt *stmt, int c) { return api.column_double(stmt, c); }
const unsigned char *haul_sqlite_column_text(haul_sqlite_stmt *stmt, int c, int *length) {
    const unsigned char *text = api.column_text(stmt, c);
    *length = text ? api.column_bytes(stmt, c) : 0;
    return text;
}
int64_t haul_sqlite_changes(haul_sqlite *db) { return api.changes64(db); }
int64_t haul_sqlite_last_insert_rowid(haul_sqlite *db) { return api.last_insert_rowid(db); }
