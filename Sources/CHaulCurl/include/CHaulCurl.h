// Haul's private window onto libcurl.
//
// We declare the handful of libcurl functions and constants we use ourselves and resolve them
// with dlopen()/dlsym() at run time (libcurl.so.4 ships with every Swift toolchain on Linux,
// because FoundationNetworking links it). That keeps `swift build` free of any -dev package and
// of unsafe linker flags. The variadic curl_easy_setopt/getinfo are wrapped in typed,
// non-variadic functions, which Swift can call.
#ifndef CHAULCURL_H
#define CHAULCURL_H

#include <stddef.h>
#include <stdint.h>

typedef void haul_curl;
typedef void haul_curlm;
struct haul_slist;

typedef size_t (*haul_curl_data_cb)(char *ptr, size_t size, size_t nmemb, void *userdata);
typedef int (*haul_curl_xferinfo_cb)(void *userdata, int64_t dltotal, int64_t dlnow, int64_t ultotal,
                                     int64_t ulnow);

/// Loads libcurl once. Returns 0 on success; otherwise writes a reason into `err`.
int haul_curl_load(char *err, size_t errlen);
/// Loads libcurl once as `haul_curl_load` does, with lazy binding (RTLD_LAZY) if this is the
/// first load: the `haul` command's choice (docs/startup.md). A library a dependency lacks a
/// function of then ends the process at that function's first call, as it would the `curl`
/// program, instead of failing the load with a message (RTLD_NOW, the library's way).
int haul_curl_load_lazily(char *err, size_t errlen);
/// The version string of the loaded libcurl (e.g. "libcurl/7.88.1 OpenSSL/3.0.19").
const char *haul_curl_version(void);

haul_curl *haul_easy_init(void);
void haul_easy_cleanup(haul_curl *h);
/// curl_easy_reset: every option back to its default and the auth state cleared, the handle
/// kept for another transfer (curl_easy_reset(3) lists the caches it keeps).
void haul_easy_reset(haul_curl *h);
int haul_easy_setopt_long(haul_curl *h, int option, long value);
int haul_easy_setopt_off(haul_curl *h, int option, int64_t value);
int haul_easy_setopt_ptr(haul_curl *h, int option, const void *value);
int haul_easy_setopt_data_cb(haul_curl *h, int option, haul_curl_data_cb cb);
int haul_easy_setopt_xferinfo_cb(haul_curl *h, int option, haul_curl_xferinfo_cb cb);
int haul_easy_getinfo_long(haul_curl *h, int info, long *value);
int haul_easy_getinfo_off(haul_curl *h, int info, int64_t *value);
int haul_easy_getinfo_ptr(haul_curl *h, int info, void **value);
int haul_easy_pause(haul_curl *h, int bitmask);
/// What a transfer's connection is, for `haul doctor` (call it while the transfer runs, after its
/// answer's head: the TLS session is the live connection's). `http_version` gets curl's
/// CURL_HTTP_VERSION_* of the answer (0: unknown); `tls` the protocol's name ("TLSv1.3"; empty
/// when not TLS or the TLS library is not OpenSSL or GnuTLS); `expiry` the leaf certificate's
/// "Expire date" as libcurl's certificate info gives it (empty without CURLOPT_CERTINFO, or on a
/// reused connection).
void haul_easy_connection_info(haul_curl *h, long *http_version, char *tls, size_t tls_len, char *expiry,
                               size_t expiry_len);
const char *haul_easy_strerror(int code);

haul_curlm *haul_multi_init(void);
int haul_multi_cleanup(haul_curlm *m);
int haul_multi_setopt_long(haul_curlm *m, int option, long value);
int haul_multi_add_handle(haul_curlm *m, haul_curl *h);
int haul_multi_remove_handle(haul_curlm *m, haul_curl *h);
int haul_multi_perform(haul_curlm *m, int *running);
int haul_multi_poll(haul_curlm *m, int timeout_ms, int *numfds);
int haul_multi_wakeup(haul_curlm *m);
/// Reads one finished transfer: returns 1 and fills `easy`/`result` for a CURLMSG_DONE, else 0.
int haul_multi_info_read_done(haul_curlm *m, haul_curl **easy, int *result);

struct haul_slist *haul_slist_append(struct haul_slist *list, const char *string);
void haul_slist_free_all(struct haul_slist *list);

// Options (CURLOPT_*), values from curl.h: type base + number.
enum {
    HAUL_CURLOPT_WRITEDATA = 10001,
    HAUL_CURLOPT_URL = 10002,
    HAUL_CURLOPT_ERRORBUFFER = 10010,
    HAUL_CURLOPT_WRITEFUNCTION = 20011,
    HAUL_CURLOPT_USERAGENT = 10018,
    HAUL_CURLOPT_LOW_SPEED_LIMIT = 19,
    HAUL_CURLOPT_LOW_SPEED_TIME = 20,
    HAUL_CURLOPT_HTTPHEADER = 10023,
    HAUL_CURLOPT_HEADERDATA = 10029,
    HAUL_CURLOPT_CUSTOMREQUEST = 10036,
    HAUL_CURLOPT_NOPROGRESS = 43,
    HAUL_CURLOPT_NOBODY = 44,
    HAUL_CURLOPT_FOLLOWLOCATION = 52,
    HAUL_CURLOPT_XFERINFODATA = 10057,
    HAUL_CURLOPT_SSL_VERIFYPEER = 64,
    HAUL_CURLOPT_CAINFO = 10065,
    HAUL_CURLOPT_HTTPGET = 80,
    HAUL_CURLOPT_SSL_VERIFYHOST = 81,
    HAUL_CURLOPT_BUFFERSIZE = 98,
    HAUL_CURLOPT_NOSIGNAL = 99,
    HAUL_CURLOPT_ACCEPT_ENCODING = 10102,
    HAUL_CURLOPT_PRIVATE = 10103,
    HAUL_CURLOPT_HEADERFUNCTION = 20079,
    HAUL_CURLOPT_TIMEOUT_MS = 155,
    HAUL_CURLOPT_CONNECTTIMEOUT_MS = 156,
    HAUL_CURLOPT_XFERINFOFUNCTION = 20219,
    HAUL_CURLOPT_TCP_KEEPALIVE = 213,
    HAUL_CURLOPT_PROTOCOLS_STR = 10318,
    HAUL_CURLOPT_HTTP_CONTENT_DECODING = 158,
    HAUL_CURLOPT_HTTP_VERSION = 84,
    HAUL_CURLOPT_READDATA = 10009,
    HAUL_CURLOPT_READFUNCTION = 20012,
    HAUL_CURLOPT_UPLOAD = 46,
    HAUL_CURLOPT_POST = 47,
    HAUL_CURLOPT_INFILESIZE_LARGE = 30115,
    HAUL_CURLOPT_POSTFIELDSIZE_LARGE = 30120,
    HAUL_CURLOPT_PINNEDPUBLICKEY = 10230,
    HAUL_CURLOPT_PROXY = 10004,
    HAUL_CURLOPT_NOPROXY = 10177,
    HAUL_CURLOPT_PROXYUSERNAME = 10175,
    HAUL_CURLOPT_PROXYPASSWORD = 10176,
    HAUL_CURLOPT_PROXY_CAINFO = 10246,
    HAUL_CURLOPT_PROXY_SSL_VERIFYPEER = 248,
    HAUL_CURLOPT_PROXY_SSL_VERIFYHOST = 249,
    HAUL_CURLOPT_SUPPRESS_CONNECT_HEADERS = 265,
    HAUL_CURLOPT_CERTINFO = 172,
    HAUL_CURLOPT_FRESH_CONNECT = 74,
};

// Info (CURLINFO_*).
enum {
    HAUL_CURLINFO_RESPONSE_CODE = 0x200000 + 2,
    HAUL_CURLINFO_PRIVATE = 0x100000 + 21,
    HAUL_CURLINFO_HTTP_CONNECTCODE = 0x200000 + 22,
};

// Multi options.
enum {
    HAUL_CURLMOPT_PIPELINING = 3,
    HAUL_CURLMOPT_MAX_HOST_CONNECTIONS = 7,
    HAUL_CURLMOPT_MAX_TOTAL_CONNECTIONS = 13,
};

enum {
    HAUL_CURL_WRITEFUNC_PAUSE = 0x10000001,
    HAUL_CURL_READFUNC_ABORT = 0x10000000,
    HAUL_CURLPAUSE_CONT = 0,
    HAUL_CURL_HTTP_VERSION_1_1 = 2,
    HAUL_CURL_HTTP_VERSION_2_0 = 3,
    HAUL_CURL_HTTP_VERSION_2TLS = 4,
};

/// Starts writeback of a file's dirty pages without waiting (Linux sync_file_range with
/// SYNC_FILE_RANGE_WRITE, which Swift's Glibc module does not declare); a no-op elsewhere.
/// Returns 0 or an errno. Not libcurl: the one libc call Swift cannot see lives here too.
int haul_start_writeback(int fd);
/// syncfs(2): writes every dirty page and inode of `fd`'s file system and waits; 0 or errno
/// (ENOSYS off Linux).
int haul_syncfs(int fd);
/// The file system `fd` is on: its type (fstatfs(2)'s `f_type`) and its device (fstat(2)'s
/// `st_dev`, one per mounted file system); 0 or errno.
int haul_fd_fs_identity(int fd, long long *type, unsigned long long *id);
/// Bytes of the system's page cache that are dirty or being written back (/proc/meminfo's Dirty
/// and Writeback); -1 when they cannot be read.
long long haul_unwritten_bytes(void);
/// Whether the running kernel's release is `major.minor` or later (uname(2)); 0 off Linux.
int haul_kernel_at_least(int major, int minor);
/// Whether a kernel release string ("6.1.0-13-amd64") is `major.minor` or later, compared as
/// numbers; 0 when it does not start with them.
int haul_release_at_least(const char *release, int major, int minor);
/// rename(2) that fails with EEXIST instead of replacing `to` (renameat2 RENAME_NOREPLACE);
/// returns 0 or an errno (ENOSYS where there is no renameat2, EINVAL where the file system
/// cannot do it).
int haul_rename_noreplace(const char *from, const char *to);
/// Whether `directory` has a default POSIX ACL: 1, 0 (none, or a file system without them), or
/// -1 when it cannot be told (the directory missing, no permission).
int haul_has_default_acl(const char *directory);
/// A regular file with no name yet in `directory` (O_TMPFILE, write-only, close-on-exec), asked
/// for with `mode`: a file descriptor, or -errno (-EOPNOTSUPP where the kernel or file system
/// has no unnamed files).
int haul_open_unnamed(const char *directory, int mode);
/// Gives the unnamed file `fd` the name `path` (linkat of the descriptor with AT_EMPTY_PATH, or
/// where the kernel refuses that, through /proc/thread-self/fd): fails with EEXIST when anything
/// is at `path` (a symbolic link there is not followed). 0 or an errno.
int haul_link_unnamed(int fd, const char *path);
/// The same, always through /proc/thread-self/fd (the way on kernels before 6.10).
int haul_link_unnamed_through_proc(int fd, const char *path);
/// Debug builds (tests): from now on the descriptor's own link fails with `error` without being
/// tried (0: it is tried again), and what was learned and counted is forgotten.
void haul_test_refuse_empty_path_links(int error);
/// Debug builds (tests): how many times the descriptor's own link was tried since the last call
/// of `haul_test_refuse_empty_path_links`.
int haul_test_empty_path_link_tries(void);
/// Reserves disk space for `length` bytes of `fd` from `offset` (Linux fallocate(2), mode 0: the
/// file grows where it is shorter); 0, or an errno (EOPNOTSUPP where the file system cannot, and
/// ENOTSUP off Linux). Never writes the file's blocks.
int haul_reserve(int fd, int64_t offset, int64_t length);
/// The file system type of `path` (statfs f_type), or -1.
long long haul_fs_type(const char *path);
/// The file system type of the open file `fd` (fstatfs f_type), or -1.
long long haul_fd_fs_type(int fd);
/// What `haul_status` tells of a file, from one statx(2) (identity, kind, owner and birth time
/// of the same inode, which two calls could each see of another).
typedef struct {
    uint64_t device;
    uint64_t inode;
    uint64_t links;
    int64_t size;
    /// 512-byte blocks allocated to it.
    int64_t blocks;
    uint32_t mode;
    uint32_t uid;
    int has_birth;
    int64_t birth_seconds;
    uint32_t birth_nanoseconds;
    /// The mount it was reached through (statx STATX_MNT_ID, Linux 5.8): a new id at each mount.
    int has_mount;
    uint64_t mount;
    /// Last change of its bytes (mtime) and of its inode (ctime), in nanoseconds since 1970.
    int64_t modified;
    int64_t changed;
} haul_file_status;
/// The status of `path` itself (not following a link), or of the open file `fd` when `path` is
/// NULL, from one statx (lstat/fstat where there is none, without a birth time): 0 or an errno.
int haul_status(int fd, const char *path, haul_file_status *out);
/// Sets the modification time of what is at `path` itself (not a link's target) to `seconds` since 1970, leaving
/// its access time: 0 or an errno.
int haul_set_modified(const char *path, int64_t seconds);
/// Names the calling thread (the first 15 bytes: what ps and gdb show).
void haul_set_thread_name(const char *name);

/// Takes (`lock` 1) or drops (0) a write lock on the byte at `offset` of `fd`, without waiting:
/// an open-file-description lock (F_OFD_SETLK) where there is one, else a process lock
/// (F_SETLK). Returns 0 or an errno (EAGAIN or EACCES: another holder).
int haul_lock_byte(int fd, int64_t offset, int lock);
/// glibc's mallopt(M_MMAP_THRESHOLD) and mallopt(M_TRIM_THRESHOLD) (<malloc.h>, which Swift's
/// Glibc module does not declare); a no-op elsewhere.
void haul_malloc_keep_freed(int mmap_threshold, int trim_threshold);

/// Whole blocks of a hash through libcrypto (digest.c): `state` is the chaining value (8, 8, 5
/// or 4 words, in the CPU's order), updated in place. Returns 0, touching nothing, where
/// libcrypto is not there; then the caller hashes them itself.
enum { HAUL_DIGEST_SHA256 = 0, HAUL_DIGEST_SHA512 = 1, HAUL_DIGEST_SHA1 = 2, HAUL_DIGEST_MD5 = 3 };
int haul_digest_blocks(int algorithm, void *state, const void *data, size_t blocks);
/// 1 when libcrypto hashes `algorithm`'s blocks here, else 0.
int haul_digest_available(int algorithm);

#endif
