#!/usr/bin/env python3
"""Where a many-small-files run's time goes, thread by thread: haul -j16 and curl --parallel.

For each client, the median over --runs of each thread's CPU time, its time waiting for a CPU
while runnable (the run queue) and its time slices, read from /proc/self/task/*/schedstat as the
process ends (a preloaded library hooks _exit and exit, and a destructor covers a return from
main); the process's CPU from getrusage, which also counts threads that ended before it (haul's
libcurl loader: a few ms that no thread's line shows). Threads of one name are added up: with
this toolchain's Dispatch, its pool threads (haul's file worker among them) share one name; the
main thread's line is marked. Also when libcurl's dlopen() began and how long it took, and when
the first connect() came, in ms after the preloaded library's constructor ran: about when haul
started, and for curl, which is linked to libcurl, after ld.so loaded libcurl and its libraries
(about 4-5 ms after exec here; the CPU figures do include that load, counted from the thread's
start). Every file's SHA-256 is checked. Needs a C compiler (cc) and glibc; the hooks cost a few
microseconds a call, and the dlopen() hook makes glibc search libraries as for the preloaded
library (no RUNPATH of the caller: haul has none). Not part of `swift test`; figures in
Benchmarks/RESULTS.md.

usage: Benchmarks/threads.py [--files 1000] [--kib 16] [--jobs 16] [--runs 11] [--haul PATH]
                             [--out-dir /dev/shm]
"""
import argparse, collections, os, shutil, statistics, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Nginx, sha256, shuffled, small_files

PRELOAD = r"""
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
static double t0, load_start, load_end, first_connect;
static atomic_int dumped, connected;
static int (*real_connect)(int, const struct sockaddr *, socklen_t);
static void *(*real_dlopen)(const char *, int);
static void (*real_exit)(int);
static void (*real__exit)(int);
static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
// The real functions are looked up here, before the program runs: not in a hook, where dlsym
// would wait for a dlopen in progress.
__attribute__((constructor(101))) static void start(void) {
    t0 = now();
    *(void **)&real_connect = dlsym(RTLD_NEXT, "connect");
    *(void **)&real_dlopen = dlsym(RTLD_NEXT, "dlopen");
    *(void **)&real_exit = dlsym(RTLD_NEXT, "exit");
    *(void **)&real__exit = dlsym(RTLD_NEXT, "_exit");
}
int connect(int fd, const struct sockaddr *a, socklen_t l) {
    if (!atomic_exchange(&connected, 1)) first_connect = now() - t0;
    return real_connect(fd, a, l);
}
// The first libcurl asked for, to the first that loaded (haul tries libcurl.so.4 first).
void *dlopen(const char *f, int m) {
    int curl = f && strstr(f, "libcurl") && !load_end;
    if (curl && !load_start) load_start = now() - t0;
    void *r = real_dlopen(f, m);
    if (curl && r) load_end = now() - t0;
    return r;
}
// Each thread's line, the main thread's marked, and the whole process's CPU (getrusage: threads
// that ended are in it, which /proc/self/task no longer lists).
__attribute__((destructor)) static void dump(void) {
    const char *out = getenv("HAUL_BENCH_THREADS_OUT");
    if (!out || atomic_exchange(&dumped, 1)) return;
    FILE *f = fopen(out, "a");
    DIR *d = opendir("/proc/self/task");
    if (!f || !d) {
        fprintf(stderr, "threads.so: cannot write %s or read /proc/self/task\n", out);
        if (f) fclose(f);
        if (d) closedir(d);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[300], comm[64] = {0};
        unsigned long long run = 0, wait = 0, slices = 0;
        snprintf(p, sizeof p, "/proc/self/task/%s/comm", e->d_name);
        FILE *c = fopen(p, "r");
        if (c) { if (!fgets(comm, sizeof comm, c)) comm[0] = 0; fclose(c); }
        comm[strcspn(comm, "\n")] = 0;
        snprintf(p, sizeof p, "/proc/self/task/%s/schedstat", e->d_name);
        FILE *s = fopen(p, "r");
        if (s) { if (fscanf(s, "%llu %llu %llu", &run, &wait, &slices) != 3) run = 0; fclose(s); }
        int main_thread = atoi(e->d_name) == getpid();
        fprintf(f, "thread\t%s%s\t%.3f\t%.3f\t%llu\n", main_thread ? "main: " : "", comm, run / 1e6, wait / 1e6,
                slices);
    }
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    double cpu = (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1e3
                 + (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e3;
    fprintf(f, "marks\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\n--\n", load_start, load_end, first_connect, now() - t0, cpu);
    closedir(d);
    fclose(f);
}
// haul ends with _exit (docs/startup.md): no destructor runs then. Writing the report from a
// second Ctrl-C's _exit is this benchmark's doing, never haul's.
void _exit(int code) {
    dump();
    real__exit(code);
    __builtin_unreachable();
}
void exit(int code) {
    dump();
    real_exit(code);
    __builtin_unreachable();
}
"""


def summary(report, runs):
    """Per thread name: medians of CPU ms, run-queue wait ms, slices; and medians of the marks
    (the load's start, its length, the first connect, the end, the process's CPU)."""
    threads, marks = collections.defaultdict(lambda: ([], [], [])), ([], [], [], [], [])
    recorded = 0
    for run in open(report).read().split("--\n"):
        if not run.strip():
            continue
        recorded += 1
        seen = collections.defaultdict(lambda: [0.0, 0.0, 0])
        for line in run.strip().splitlines():
            fields = line.split("\t")
            if fields[0] == "thread":
                seen[fields[1]][0] += float(fields[2])
                seen[fields[1]][1] += float(fields[3])
                seen[fields[1]][2] += int(fields[4])
            elif fields[0] == "marks":
                start, end, connect, finish, cpu = (float(x) for x in fields[1:6])
                for i, value in enumerate((start, end - start, connect, finish, cpu)):
                    marks[i].append(value)
        for name, values in seen.items():
            for i in range(3):
                threads[name][i].append(values[i])
    if recorded != runs:
        sys.exit(f"{report}: {recorded} runs recorded of {runs}")
    return ({k: [statistics.median(x) for x in v] for k, v in threads.items()},
            [statistics.median(m) for m in marks])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--kib", type=int, default=16)
    ap.add_argument("--jobs", type=int, default=16)
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--haul", default=".build/release/haul")
    ap.add_argument("--out-dir", default="/dev/shm", help="where the files go (default: /dev/shm)")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="haul-bench-threads-")
    outs = os.path.join(a.out_dir, f"haul-bench-threads-{os.getpid()}")
    server = None
    try:
        preload = os.path.join(work, "threads.so")
        with open(os.path.join(work, "threads.c"), "w") as f:
            f.write(PRELOAD)
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", preload, os.path.join(work, "threads.c"), "-ldl"],
                       check=True)
        server = Nginx({})
        names, sums, urls, config = small_files(server, work, a.files, a.kib)
        j = str(a.jobs)
        clients = {
            "curl": ["curl", "-s", "--parallel", "--parallel-max", j, "-K", config],
            "haul": [os.path.abspath(a.haul), "get", "-q", "-j", j, "-d", ".", "-i", urls],
        }
        for run in range(a.runs):
            for name, cmd in shuffled(clients):
                out = os.path.join(outs, f"{name}-{run}")
                os.makedirs(out)
                env = dict(os.environ, LD_PRELOAD=preload,
                           HAUL_BENCH_THREADS_OUT=os.path.join(work, f"{name}.txt"))
                subprocess.run(cmd, cwd=out, env=env, check=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
                for n in names:
                    if sha256(os.path.join(out, n)) != sums[n]:
                        sys.exit(f"{name}: {n} differs")
                shutil.rmtree(out)
        print(f"{a.files} files of {a.kib} KiB, -j{a.jobs}, medians of {a.runs}; nproc={os.cpu_count()}")
        for name in clients:
            threads, (start, load, connect, end, cpu) = summary(os.path.join(work, f"{name}.txt"), a.runs)
            loaded = f"libcurl's dlopen() from {start:.1f} ms, {load:.1f} ms long; " if load else ""
            print(f"{name}: {loaded}first connect {connect:.1f} ms, end {end:.1f} ms (after the preload's start); "
                  f"process CPU {cpu:.1f} ms")
            for thread, (cpu, wait, slices) in sorted(threads.items(), key=lambda t: -t[1][0]):
                print(f"  {thread:24} cpu {cpu:7.1f} ms  waiting for a CPU {wait:6.1f} ms  slices {slices:6.0f}")
    finally:
        if server:
            server.stop()
        shutil.rmtree(outs, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
