#define _GNU_SOURCE
#include "CHaulCurl.h"

#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <fcntl.h>
#include <unistd.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#ifdef __linux__
#include <sys/vfs.h>
#include <sys/utsname.h>
#include <sys/xattr.h>
#endif

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int msg;
    void *easy_handle;
    union {
        void *whatever;
        int result;
    } data;
} haul_curlmsg;

static struct {
    int (*global_init)(long);
    const char *(*version)(void);
    void *(*easy_init)(void);
    void (*easy_cleanup)(void *);
    void (*easy_reset)(void *);
    int (*easy_setopt)(void *, int, ...);
    int (*easy_getinfo)(void *, int, ...);
    int (*easy_pause)(void *, int);
    const char *(*easy_strerror)(int);
    void *(*multi_init)(void);
    int (*multi_cleanup)(void *);
    int (*multi_setopt)(void *, int, ...);
    int (*multi_add_handle)(void *, void *);
    int (*multi_remove_handle)(void *, void *);
    int (*multi_perform)(void *, int *);
    int (*multi_poll)(void *, void *, unsigned int, int, int *);
    int (*multi_wakeup)(void *);
    haul_curlmsg *(*multi_info_read)(void *, int *);
    struct haul_slist *(*slist_append)(struct haul_slist *, const char *);
    void (*slist_free_all)(struct haul_slist *);
} api;

/// The loaded libcurl, for the TLS library's symbols that came with it.
static void *curl_library;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
/// How the first load binds libcurl's and its libraries' functions (haul_curl_load_lazily).
static int load_mode = RTLD_NOW;
static char load_error[512];
static int load_status = -1;

#define RESOLVE(field, name)                                                                   \
    do {                                                                                       \
        *(void **)(&api.field) = dlsym(lib, name);                                             \
        if (!api.field) {                                                                      \
            snprintf(load_error, sizeof load_error, "libcurl lacks %s (need 7.68 or newer)", name); \
            return;                                                                            \
        }                                                                                      \
    } while (0)

static void load(void) {
    static const char *candidates[] = {
#ifdef __APPLE__
        "libcurl.4.dylib", "/usr/lib/libcurl.4.dylib",
#else
        "libcurl.so.4", "libcurl-gnutls.so.4", "libcurl-nss.so.4", "libcurl.so",
#endif
        NULL};
    void *lib = NULL;
#ifdef HAUL_TEST_HOOKS
    // Tests of a machine without libcurl name one that is not there (debug builds only; not
    // for a process with raised privileges).
#ifdef __GLIBC__
    const char *only = secure_getenv("HAUL_TEST_LIBCURL");
#else
    const char *only = getenv("HAUL_TEST_LIBCURL");
#endif
    if (only) {
        lib = dlopen(only, load_mode | RTLD_LOCAL);
        if (!lib) {
            snprintf(load_error, sizeof load_error, "cannot load libcurl: %s", dlerror());
            return;
        }
    }
#endif
    for (int i = 0; candidates[i] && !lib; i++) lib = dlopen(candidates[i], load_mode | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(load_error, sizeof load_error, "cannot load libcurl: %s", e ? e : "not found");
        return;
    }
    curl_library = lib;
    RESOLVE(global_init, "curl_global_init");
    RESOLVE(version, "curl_version");
    RESOLVE(easy_init, "curl_easy_init");
    RESOLVE(easy_cleanup, "curl_easy_cleanup");
    RESOLVE(easy_reset, "curl_easy_reset");
    RESOLVE(easy_setopt, "curl_easy_setopt");
    RESOLVE(easy_getinfo, "curl_easy_getinfo");
    RESOLVE(easy_pause, "curl_easy_pause");
    RESOLVE(easy_strerror, "curl_easy_strerror");
    RESOLVE(multi_init, "curl_multi_init");
    RESOLVE(multi_cleanup, "curl_multi_cleanup");
    RESOLVE(multi_setopt, "curl_multi_setopt");
    RESOLVE(multi_add_handle, "curl_multi_add_handle");
    RESOLVE(multi_remove_handle, "curl_multi_remove_handle");
    RESOLVE(multi_perform, "curl_multi_perform");
    RESOLVE(multi_poll, "curl_multi_poll");
    RESOLVE(multi_wakeup, "curl_multi_wakeup");
    RESOLVE(multi_info_read, "curl_multi_info_read");
    RESOLVE(slist_append, "curl_slist_append");
    RESOLVE(slist_free_all, "curl_slist_free_all");
    // CURL_GLOBAL_DEFAULT (SSL | WIN32). Reference-counted inside libcurl, so sharing the library
    // with FoundationNetworking is fine.
    if (api.global_init(3) != 0) {
        snprintf(load_error, sizeof load_error, "curl_global_init failed");
        return;
    }
    load_status = 0;
}

static void load_lazily(void) {
    load_mode = RTLD_LAZY;
    load();
}

int haul_curl_load_lazily(char *err, size_t errlen) {
    pthread_once(&load_once, load_lazily);
    if (load_status != 0 && err && errlen) snprintf(err, errlen, "%s", load_error);
    return load_status;
}

int haul_curl_load(char *err, size_t errlen) {
    pthread_once(&load_once, load);
    if (load_status != 0 && err && errlen) snprintf(err, errlen, "%s", load_error);
    return load_status;
}

const char *haul_curl_version(void) { return api.version(); }
haul_curl *haul_easy_init(void) { return api.easy_init(); }
void haul_easy_cleanup(haul_curl *h) { api.easy_cleanup(h); }
void haul_easy_reset(haul_curl *h) { api.easy_reset(h); }
int haul_easy_setopt_long(haul_curl *h, int o, long v) { return api.easy_setopt(h, o, v); }
int haul_easy_setopt_off(haul_curl *h, int o, int64_t v) { return api.easy_setopt(h, o, (int64_t)v); }
int haul_easy_setopt_ptr(haul_curl *h, int o, const void *v) { return api.easy_setopt(h, o, v); }
int haul_easy_setopt_data_cb(haul_curl *h, int o, haul_curl_data_cb cb) { return api.easy_setopt(h, o, cb); }
int haul_easy_setopt_xferinfo_cb(haul_curl *h, int o, haul_curl_xferinfo_cb cb) {
    return api.easy_setopt(h, o, cb);
}
int haul_easy_getinfo_long(haul_curl *h, int i, long *v) { return api.easy_getinfo(h, i, v); }
int haul_easy_getinfo_off(haul_curl *h, int i, int64_t *v) { return api.easy_getinfo(h, i, v); }
int haul_easy_getinfo_ptr(haul_curl *h, int i, void **v) { return api.easy_getinfo(h, i, v); }
int haul_easy_pause(haul_curl *h, int bitmask) { return api.easy_pause(h, bitmask); }
const char *haul_easy_strerror(int code) { return api.easy_strerror(code); }

struct haul_slist_item {
    char *data;
    struct haul_slist_item *next;
};

void haul_easy_connection_info(haul_curl *h, long *http_version, char *tls, size_t tls_len, char *expiry,
                               size_t expiry_len) {
    *http_version = 0;
    if (tls_len) tls[0] = 0;
    if (expiry_len) expiry[0] = 0;
    long version = 0;
    if (api.easy_getinfo(h, 0x200000 + 46 /* CURLINFO_HTTP_VERSION */, &version) == 0) *http_version = version;
    // CURLINFO_TLS_SSL_PTR: the backend and its session (an SSL * for OpenSSL, a
    // gnutls_session_t for GnuTLS), whose protocol version the TLS library names.
    struct {
        int backend;
        void *internals;
    } *session = NULL;
    if (api.easy_getinfo(h, 0x400000 + 45, &session) == 0 && session && session->internals && curl_library) {
        if (session->backend == 1 /* CURLSSLBACKEND_OPENSSL */) {
            const char *(*get_version)(const void *) = NULL;
            *(void **)(&get_version) = dlsym(curl_library, "SSL_get_version");
            const char *name = get_version ? get_version(session->internals) : NULL;
            if (name && tls_len) snprintf(tls, tls_len, "%s", name);
        } else if (session->backend == 2 /* CURLSSLBACKEND_GNUTLS */) {
            int (*get_protocol)(void *) = NULL;
            const char *(*protocol_name)(int) = NULL;
            *(void **)(&get_protocol) = dlsym(curl_library, "gnutls_protocol_get_version");
            *(void **)(&protocol_name) = dlsym(curl_library, "gnutls_protocol_get_name");
            const char *name = get_protocol && protocol_name ? protocol_name(get_protocol(session->internals)) : NULL;
            if (name && tls_len) snprintf(tls, tls_len, "%s", name);
        }
    }
    // CURLINFO_CERTINFO: a list of "Key:value" lines per certificate, the server's own first.
    struct {
        int count;
        struct haul_slist_item **certificates;
    } *info = NULL;
    if (api.easy_getinfo(h, 0x400000 + 34, &info) == 0 && info && info->count > 0 && info->certificates) {
        static const char key[] = "Expire date:";
        for (struct haul_slist_item *item = info->certificates[0]; item; item = item->next) {
            if (item->data && strncmp(item->data, key, sizeof key - 1) == 0) {
                if (expiry_len) snprintf(expiry, expiry_len, "%s", item->data + sizeof key - 1);
                break;
            }
        }
    }
}

haul_curlm *haul_multi_init(void) { return api.multi_init(); }
int haul_multi_cleanup(haul_curlm *m) { return api.multi_cleanup(m); }
int haul_multi_setopt_long(haul_curlm *m, int o, long v) { return api.multi_setopt(m, o, v); }
int haul_multi_add_handle(haul_curlm *m, haul_curl *h) { return api.multi_add_handle(m, h); }
int haul_multi_remove_handle(haul_curlm *m, haul_curl *h) { return api.multi_remove_handle(m, h); }
int haul_multi_perform(haul_curlm *m, int *running) { return api.multi_perform(m, running); }
int haul_multi_poll(haul_curlm *m, int timeout_ms, int *numfds) {
    return api.multi_poll(m, NULL, 0, timeout_ms, numfds);
}
int haul_multi_wakeup(haul_curlm *m) { return api.multi_wakeup(m); }
int haul_multi_info_read_done(haul_curlm *m, haul_curl **easy, int *result) {
    int left = 0;
    haul_curlmsg *msg;
    while ((msg = api.multi_info_read(m, &left)) != NULL) {
        if (msg->msg == 1 /* CURLMSG_DONE */) {
            *easy = msg->easy_handle;
            *result = msg->data.result;
            return 1;
        }
    }
    return 0;
}

struct haul_slist *haul_slist_append(struct haul_slist *l, const char *s) { return api.slist_append(l, s); }
void haul_slist_free_all(struct haul_slist *l) { api.slist_free_all(l); }

int haul_start_writeback(int fd) {
#ifdef __linux__
    return sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE) == 0 ? 0 : errno;
#else
    (void)fd;
    return 0;
#endif
}

int haul_syncfs(int fd) {
#ifdef __linux__
    return syncfs(fd) == 0 ? 0 : errno;
#else
    (void)fd;
    return ENOSYS;
#endif
}

int haul_fd_fs_identity(int fd, long long *type, unsigned long long *id) {
#ifdef __linux__
    struct statfs fs;
    struct stat st;
    if (fstatfs(fd, &fs) != 0 || fstat(fd, &st) != 0) return errno;
    *type = (long long)fs.f_type;
    *id = (unsigned long long)st.st_dev;
    return 0;
#else
    (void)fd, (void)type, (void)id;
    return ENOSYS;
#endif
}

long long haul_unwritten_bytes(void) {
#ifdef __linux__
    int fd = open("/proc/meminfo", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char text[8192];
    size_t used = 0;
    ssize_t n;
    while (used < sizeof text - 1 && (n = read(fd, text + used, sizeof text - 1 - used)) != 0) {
        if (n < 0) {
            if (errno == EINTR) continue;
            close(fd);
            return -1;
        }
        used += (size_t)n;
    }
    close(fd);
    text[used] = 0;
    long long total = 0;
    static const char *const keys[] = {"\nDirty:", "\nWriteback:"};
    for (int i = 0; i < 2; i++) {
        const char *at = strstr(text, keys[i]);
        if (!at) return -1;
        char *end;
        long long kib = strtoll(at + strlen(keys[i]), &end, 10);
        if (end == at + strlen(keys[i]) || kib < 0 || kib > (1LL << 40)) return -1;
        total += kib * 1024;
    }
    return total;
#else
    return -1;
#endif
}

int haul_release_at_least(const char *release, int major, int minor) {
    int have_major = 0, have_minor = 0;
    if (!release || sscanf(release, "%d.%d", &have_major, &have_minor) != 2) return 0;
    return have_major > major || (have_major == major && have_minor >= minor);
}

int haul_kernel_at_least(int major, int minor) {
#ifdef __linux__
    struct utsname u;
    if (uname(&u) != 0) return 0;
    return haul_release_at_least(u.release, major, minor);
#else
    (void)major, (void)minor;
    return 0;
#endif
}

int haul_rename_noreplace(const char *from, const char *to) {
#if defined(__linux__) && defined(RENAME_NOREPLACE)
    return renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0 ? 0 : errno;
#else
    (void)from;
    (void)to;
    return ENOSYS;
#endif
}

int haul_has_default_acl(const char *directory) {
#ifdef __linux__
    ssize_t size = getxattr(directory, "system.posix_acl_default", NULL, 0);
    if (size > 0) return 1;
    if (size == 0) return 0;
    // No such attribute, or none on this file system: known to have none. Anything else (the
    // directory missing, no permission, an I/O error) says nothing either way.
    return errno == ENODATA || errno == ENOTSUP || errno == EOPNOTSUPP ? 0 : -1;
#else
    (void)directory;
    return 0;
#endif
}

int haul_open_unnamed(const char *directory, int mode) {
#if defined(__linux__) && defined(O_TMPFILE)
    int fd = open(directory, O_TMPFILE | O_WRONLY | O_CLOEXEC, (mode_t)mode);
    return fd >= 0 ? fd : -errno;
#else
    (void)directory;
    (void)mode;
    return -EOPNOTSUPP;
#endif
}

/* The kernel refused to link a descriptor itself (AT_EMPTY_PATH) once: /proc from then on. */
static _Atomic int empty_path_refused = 0;

#ifdef HAUL_TEST_HOOKS
/* Tests: the errno the descriptor's own link fails with, without being tried (0: tried), and
   how many times it was tried. */
static _Atomic int test_empty_path_errno = 0;
static _Atomic int test_empty_path_tries = 0;

void haul_test_refuse_empty_path_links(int error) {
    atomic_store(&test_empty_path_errno, error);
    atomic_store(&empty_path_refused, 0);
    atomic_store(&test_empty_path_tries, 0);
}

int haul_test_empty_path_link_tries(void) { return atomic_load(&test_empty_path_tries); }
#endif

/* linkat(fd, "", AT_EMPTY_PATH), or the errno it fails with. */
static int link_descriptor(int fd, const char *path) {
#ifdef HAUL_TEST_HOOKS
    atomic_fetch_add(&test_empty_path_tries, 1);
    int refused = atomic_load(&test_empty_path_errno);
    if (refused) return refused;
#endif
#ifdef __linux__
    return linkat(fd, "", AT_FDCWD, path, AT_EMPTY_PATH) == 0 ? 0 : errno;
#else
    (void)fd;
    (void)path;
    return ENOSYS;
#endif
}

int haul_link_unnamed(int fd, const char *path) {
#ifdef __linux__
    // The descriptor itself first (AT_EMPTY_PATH): Linux 6.10 lets the opener link its own
    // unnamed file so (and any kernel a process with CAP_DAC_READ_SEARCH); elsewhere it fails
    // with ENOENT (or EPERM in some sandboxes), and then /proc's name for the descriptor is the
    // way, remembered for the process once /proc has linked. The /proc lookup costs a path
    // walk through procfs for every file.
    if (!atomic_load_explicit(&empty_path_refused, memory_order_relaxed)) {
        int error = link_descriptor(fd, path);
        if (error == 0) return 0;
        if (error != ENOENT && error != EPERM) return error;
    }
    int error = haul_link_unnamed_through_proc(fd, path);
    if (error == 0) atomic_store_explicit(&empty_path_refused, 1, memory_order_relaxed);
    return error;
#else
    (void)fd;
    (void)path;
    return ENOSYS;
#endif
}

int haul_link_unnamed_through_proc(int fd, const char *path) {
#ifdef __linux__
    char self[64];
    // thread-self: /proc/self is the thread group leader's, gone if that thread has exited.
    snprintf(self, sizeof self, "/proc/thread-self/fd/%d", fd);
    return linkat(AT_FDCWD, self, AT_FDCWD, path, AT_SYMLINK_FOLLOW) == 0 ? 0 : errno;
#else
    (void)fd;
    (void)path;
    return ENOSYS;
#endif
}

int haul_reserve(int fd, int64_t offset, int64_t length) {
#ifdef __linux__
    /* fallocate(2), not posix_fallocate(3): where the file system cannot reserve, glibc's
       emulation writes a zero into every block, which races the writes of other connections. */
    return fallocate(fd, 0, (off_t)offset, (off_t)length) == 0 ? 0 : errno;
#else
    (void)fd;
    (void)offset;
    (void)length;
    return ENOTSUP;
#endif
}

long long haul_fs_type(const char *path) {
#ifdef __linux__
    struct statfs st;
    return statfs(path, &st) == 0 ? (long long)st.f_type : -1;
#else
    (void)path;
    return -1;
#endif
}

long long haul_fd_fs_type(int fd) {
#ifdef __linux__
    struct statfs st;
    return fstatfs(fd, &st) == 0 ? (long long)st.f_type : -1;
#else
    (void)fd;
    return -1;
#endif
}

/* lstat/fstat: no birth time or mount (kernels or sandboxes without statx). */
static int haul_status_without_statx(int fd, const char *path, haul_file_status *out) {
    struct stat st;
    int r = path ? lstat(path, &st) : fstat(fd, &st);
    if (r != 0) return errno;
    out->device = (uint64_t)st.st_dev;
    out->inode = (uint64_t)st.st_ino;
    out->links = (uint64_t)st.st_nlink;
    out->size = (int64_t)st.st_size;
    out->blocks = (int64_t)st.st_blocks;
    out->mode = (uint32_t)st.st_mode;
    out->uid = (uint32_t)st.st_uid;
    out->has_birth = 0;
    out->birth_seconds = 0;
    out->birth_nanoseconds = 0;
    out->has_mount = 0;
    out->mount = 0;
    out->modified = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    out->changed = (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec;
    return 0;
}

int haul_status(int fd, const char *path, haul_file_status *out) {
#if defined(__linux__) && defined(STATX_BTIME)
    struct statx st;
    unsigned mask =
        STATX_TYPE | STATX_MODE | STATX_NLINK | STATX_UID | STATX_INO | STATX_SIZE | STATX_BLOCKS | STATX_BTIME | STATX_MTIME | STATX_CTIME;
#ifdef STATX_MNT_ID
    mask |= STATX_MNT_ID;
#endif
    int r = path ? statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, mask, &st) : statx(fd, "", AT_EMPTY_PATH, mask, &st);
    if (r != 0 && (errno == ENOSYS || errno == EPERM)) return haul_status_without_statx(fd, path, out);
    if (r != 0) return errno;
    out->device = (uint64_t)makedev(st.stx_dev_major, st.stx_dev_minor);
    out->inode = st.stx_ino;
    out->links = st.stx_nlink;
    out->size = (int64_t)st.stx_size;
    out->blocks = (int64_t)st.stx_blocks;
    out->mode = st.stx_mode;
    out->uid = st.stx_uid;
    out->has_birth = (st.stx_mask & STATX_BTIME) != 0;
    out->birth_seconds = st.stx_btime.tv_sec;
    out->birth_nanoseconds = st.stx_btime.tv_nsec;
#ifdef STATX_MNT_ID
    out->has_mount = (st.stx_mask & STATX_MNT_ID) != 0;
    out->mount = st.stx_mnt_id;
#else
    out->has_mount = 0;
    out->mount = 0;
#endif
    out->modified = (int64_t)st.stx_mtime.tv_sec * 1000000000 + st.stx_mtime.tv_nsec;
    out->changed = (int64_t)st.stx_ctime.tv_sec * 1000000000 + st.stx_ctime.tv_nsec;
    return 0;
#else
    return haul_status_without_statx(fd, path, out);
#endif
}

int haul_set_modified(const char *path, int64_t seconds) {
    struct timespec times[2] = {{.tv_sec = 0, .tv_nsec = UTIME_OMIT}, {.tv_sec = (time_t)seconds, .tv_nsec = 0}};
    return utimensat(AT_FDCWD, path, times, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : errno;
}

void haul_malloc_keep_freed(int mmap_threshold, int trim_threshold) {
#ifdef __GLIBC__
    mallopt(M_MMAP_THRESHOLD, mmap_threshold);
    mallopt(M_TRIM_THRESHOLD, trim_threshold);
#else
    (void)mmap_threshold;
    (void)trim_threshold;
#endif
}

void haul_set_thread_name(const char *name) {
    char cut[16];
    snprintf(cut, sizeof cut, "%s", name);
#if defined(__APPLE__)
    pthread_setname_np(cut);
#else
    pthread_setname_np(pthread_self(), cut);
#endif
}

int haul_lock_byte(int fd, int64_t offset, int lock) {
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = lock ? F_WRLCK : F_UNLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = (off_t)offset;
    fl.l_len = 1;
#ifdef F_OFD_SETLK
    int command = F_OFD_SETLK;
#else
    int command = F_SETLK;
#endif
    return fcntl(fd, command, &fl) == 0 ? 0 : errno;
}
