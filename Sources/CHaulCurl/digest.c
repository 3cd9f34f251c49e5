// Whole blocks of SHA-256, SHA-512, SHA-1 and MD5 through OpenSSL's libcrypto, dlopen()ed as
// libcurl is (it is already in the process where libcurl uses OpenSSL): its code uses the CPU's
// SHA instructions, four to seven times Haul's own Swift code on SHA-256. Only whole blocks go
// in, so the context never buffers and its chaining value is all the state there is; Haul
// keeps the buffer, the length and the padding (docs/integrity.md).
#define _GNU_SOURCE
#include "CHaulCurl.h"

#include <dlfcn.h>
#include <pthread.h>
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

int haul_digest_blocks(int algorithm, void *state, const void *data, size_t blocks) {
    pthread_once(&once, load);
    if (algorithm < 0 || algorithm > 3 || !updates[algorithm] || blocks == 0) return 0;
    int ok = 0;
    switch (algorithm) {
    case HAUL_DIGEST_SHA256: {
        sha256_ctx c;
        memset(&c, 0, sizeof c);
        memcpy(c.h, state, sizeof c.h);
        c.md_len = 32;
        ok = updates[0](&c, data, blocks * 64) == 1 && c.num == 0;
        if (ok) memcpy(state, c.h, sizeof c.h);
        break;
    }
    case HAUL_DIGEST_SHA512: {
        sha512_ctx c;
        memset(&c, 0, sizeof c);
        memcpy(c.h, state, sizeof c.h);
        c.md_len = 64;
        ok = updates[1](&c, data, blocks * 128) == 1 && c.num == 0;
        if (ok) memcpy(state, c.h, sizeof c.h);
        break;
    }
    case HAUL_DIGEST_SHA1: {
        sha1_ctx c;
        memset(&c, 0, sizeof c);
        memcpy(c.h, state, sizeof c.h);
        ok = updates[2](&c, data, blocks * 64) == 1 && c.num == 0;
        if (ok) memcpy(state, c.h, sizeof c.h);
        break;
    }
    case HAUL_DIGEST_MD5: {
        md5_ctx c;
        memset(&c, 0, sizeof c);
        memcpy(c.h, state, sizeof c.h);
        ok = updates[3](&c, data, blocks * 64) == 1 && c.num == 0;
        if (ok) memcpy(state, c.h, sizeof c.h);
        break;
    }
    }
    return ok;
}
