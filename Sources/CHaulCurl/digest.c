// Whole blocks of SHA-256, SHA-512, SHA-1 and MD5 through OpenSSL's libcrypto, dlopen()ed as
// libcurl is (it is already in the process where libcurl uses OpenSSL): its code uses the CPU's
// SHA instructions, four to seven times Haul's own Swift code on SHA-256. Only whole blocks go
// in, so the context never buffers and its chaining value is all the state there is; Haul
// keeps the buffer, the length and the padding (docs/integrity.md).
#define _GNU_SOURCE
#include "CHaulCurl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

// The contexts of <openssl/sha.h> and <openssl/md5.h> (public structs, the same layout since
// OpenSSL 0.9.7; libcrypto.so.3 is the only soname tried), with room to spare.
typedef struct {
    uint32_t h[8];
    uint32_t Nl, Nh;
    uint32_t data[16];
    unsigned int num, md_len;
    unsigned char spare[64];
} sha256_ctx;

typedef struct {
    uint64_t h[8];
    uint64_t Nl, Nh;
    uint64_t d[16];
    unsigned int num, md_len;
    unsigned char spare[64];
} sha512_ctx;

typedef struct {
    uint32_t h[5];
    uint32_t Nl, Nh;
    uint32_t data[16];
    unsigned int num;
    unsigned char spare[64];
} sha1_ctx;

typedef struct {
    uint32_t h[4];
    uint32_t Nl, Nh;
    uint32_t data[16];
    unsigned int num;
    unsigned char spare[64];
} md5_ctx;

typedef int (*update_fn)(void *ctx, const void *data, size_t len);
static update_fn updates[4];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void) {
#ifdef __linux__
    void *lib = dlopen("libcrypto.so.3", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    static const char *names[4] = {"SHA256_Update", "SHA512_Update", "SHA1_Update", "MD5_Update"};
    for (int i = 0; i < 4; i++) *(void **)(&updates[i]) = dlsym(lib, names[i]);
#endif
}

int haul_digest_available(int algorithm) {
    pthread_once(&once, load);
    return algorithm >= 0 && algorithm <= 3 && updates[algorithm] != NULL;
}

// Where each context keeps what a call needs: the chaining value at its start, the buffered
// count (`num`, 0 after whole blocks), and `md_len` where it has one.
static const struct {
    size_t state, block, num;
    ptrdiff_t md_len_at;
    unsigned int md_len;
} shapes[4] = {
    {sizeof(((sha256_ctx *)0)->h), 64, offsetof(sha256_ctx, num), offsetof(sha256_ctx, md_len), 32},
    {sizeof(((sha512_ctx *)0)->h), 128, offsetof(sha512_ctx, num), offsetof(sha512_ctx, md_len), 64},
    {sizeof(((sha1_ctx *)0)->h), 64, offsetof(sha1_ctx, num), -1, 0},
    {sizeof(((md5_ctx *)0)->h), 64, offsetof(md5_ctx, num), -1, 0},
};

int haul_digest_blocks(int algorithm, void *state, const void *data, size_t blocks) {
    pthread_once(&once, load);
    if (algorithm < 0 || algorithm > 3 || !updates[algorithm] || blocks == 0) return 0;
    union {
        sha256_ctx sha256;
        sha512_ctx sha512;
        sha1_ctx sha1;
        md5_ctx md5;
    } c;
    memset(&c, 0, sizeof c);
    unsigned char *bytes = (unsigned char *)&c;
    memcpy(bytes, state, shapes[algorithm].state);
    if (shapes[algorithm].md_len_at >= 0)
        memcpy(bytes + shapes[algorithm].md_len_at, &shapes[algorithm].md_len, sizeof(unsigned int));
    unsigned int num;
    int ok = updates[algorithm](&c, data, blocks * shapes[algorithm].block) == 1;
    memcpy(&num, bytes + shapes[algorithm].num, sizeof num);
    if (!ok || num != 0) return 0;
    memcpy(state, bytes, shapes[algorithm].state);
    return 1;
}
