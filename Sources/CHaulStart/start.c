// Starts loading libcurl the moment the `haul` process starts, on a thread of its own, when the
// command is one that transfers: libcurl and the thirty libraries it brings take about 9 ms to
// load, as long as Swift's start-up and the command's look at the disk together, and on a
// second core the two overlap where glibc lets them (docs/startup.md). Linked with the command's
// code (into `haul`, and into the test runner that tests that code, where no argument is a
// command and only the allocator thresholds apply); never with the library, which has no
// business changing anything at its host's start.
#include "CHaulCurl.h"
#include "CHaulStart.h"

#include <pthread.h>
#include <string.h>

#if defined(__GLIBC__) || defined(__APPLE__)
static void *load_curl(void *unused) {
    (void)unused;
    // pthread_once inside: the first transfer waits for this load. Lazy binding, as the `curl`
    // program's libraries are bound (CHaulCurl.h says what that trades).
    haul_curl_load_lazily(NULL, 0);
    return NULL;
}

static int transfers(int argc, char **argv) {
    if (argc < 2 || !argv || !argv[1]) return 0;
    const char *command = argv[1];
    if (strcmp(command, "get") != 0 && strcmp(command, "upload") != 0 && strcmp(command, "demo") != 0) return 0;
    for (int i = 2; i < argc; i++) {
        if (argv[i] && (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)) return 0;
    }
    return 1;
}

// glibc and dyld pass a program's arguments to its constructors (musl does not: there the
// first transfer loads libcurl, as a library's does).
__attribute__((constructor)) static void haul_start(int argc, char **argv) {
    // glibc's defaults hand freed heap memory back to the system once 1 MiB is free at the top
    // of an arena, and a thousand small downloads free and take again a 512 KiB receive buffer
    // each (libcurl's, per transfer): the pages would be returned and faulted in again every
    // time. Buffers under 1 MiB come from the heap instead, and up to 8 MiB stays for reuse. Set
    // by the command, not the library: an application's allocator is its own business.
    haul_malloc_keep_freed(1 << 20, 8 << 20);
    if (!transfers(argc, argv)) return;
    pthread_attr_t attributes;
    if (pthread_attr_init(&attributes) != 0) return;
    pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
    pthread_t thread;
    // No thread: the first transfer loads libcurl itself, as it would have anyway.
    (void)pthread_create(&thread, &attributes, load_curl, NULL);
    pthread_attr_destroy(&attributes);
}
#endif
