#!/usr/bin/env python3
"""Where a many-small-files run's time goes, thread by thread: haul -j16 and curl --parallel.

For each client, the median over --runs of each thread's CPU time, its time waiting for a CPU
while runnable (the run queue) and its time slices, read from /proc/self/task/*/schedstat as the
process ends (a preloaded library hooks _exit and exit, and a destructor covers a return from
main), and when libcurl's dlopen started and ended and the first connect() came, in ms after
the preloaded library's constructor ran: about when haul started, and for curl, which is linked
to libcurl, after libcurl and its libraries were loaded (about 4-5 ms after exec on this
machine, left out of curl's figures). Threads of one name are added up (the
pool threads of Dispatch). What a thread that ended before the process did is not counted (haul's
libcurl loader, a few ms). Needs a C compiler (cc) and glibc; the preload's hooks cost a few
microseconds a call. Not part of `swift test`; figures in Benchmarks/RESULTS.md.

usage: Benchmarks/threads.py [--files 1000] [--kib 16] [--jobs 16] [--runs 11] [--haul PATH]
                             [--out-dir /dev/shm]
"""
import argparse, collections, os, shutil, statistics, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Nginx, shuffled

PRELOAD = r"""
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
static double t0, load_start, load_end, first_connect;
static atomic_int dumped, connected;
static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
__attribute__((constructor(101))) static void start(void) { t0 = now(); }
int connect(int fd, const struct sockaddr *a, socklen_t l) {
    static int (*real)(int, const struct sockaddr *, socklen_t);
    if (!real) real = dlsym(RTLD_NEXT, "connect");
    if (!atomic_exchange(&connected, 1)) first_connect = now() - t0;
    return real(fd, a, l);
}
void *dlopen(const char *f, int m) {
    static void *(*real)(const char *, int);
    if (!real) real = dlsym(RTLD_NEXT, "dlopen");
    int curl = f && strstr(f, "libcurl") && !load_start;
    if (curl) load_start = now() - t0;
    void *r = real(f, m);
    if (curl) load_end = now() - t0;
    return r;
}
__attribute__((destructor)) static void dump(void) {
    const char *out = getenv("HAUL_BENCH_THREADS_OUT");
    if (!out || atomic_exchange(&dumped, 1)) return;
    FILE *f = fopen(out, "a");
    DIR *d = opendir("/proc/self/task");
    if (!f || !d) return;
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
        fprintf(f, "thread\t%s\t%.3f\t%.3f\t%llu\n", comm, run / 1e6, wait / 1e6, slices);
    }
    fprintf(f, "marks\t%.3f\t%.3f\t%.3f\t%.3f\n--\n", load_start, load_end, first_connect, now() - t0);
    closedir(d);
    fclose(f);
}
void _exit(int code) {
    dump();
    void (*real)(int) = dlsym(RTLD_NEXT, "_exit");
    real(code);
    __builtin_unreachable();
}
void exit(int code) {
    dump();
    void (*real)(int) = dlsym(RTLD_NEXT, "exit");
    real(code);
    __builtin_unreachable();
}
"""


def summary(report):
    """Per thread name: medians of CPU ms, run-queue wait ms, slices; and of the marks."""
    threads, marks = collections.defaultdict(lambda: ([], [], [])), ([], [], [], [])
    for run in open(report).read().split("--\n"):
        if not run.strip():
            continue
        seen = collections.defaultdict(lambda: [0.0, 0.0, 0])
        for line in run.strip().splitlines():
            fields = line.split("\t")
            if fields[0] == "thread":
                seen[fields[1]][0] += float(fields[2])
                seen[fields[1]][1] += float(fields[3])
                seen[fields[1]][2] += int(fields[4])
            elif fields[0] == "marks":
                for i in range(4):
                    marks[i].append(float(fields[i + 1]))
        for name, values in seen.items():
            for i in range(3):
                threads[name][i].append(values[i])
    return ({k: [statistics.median(x) for x in v] for k, v in threads.items()},
            [statistics.median(m) if m else 0.0 for m in marks])


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
    preload = os.path.join(work, "threads.so")
    with open(os.path.join(work, "threads.c"), "w") as f:
        f.write(PRELOAD)
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", preload, os.path.join(work, "threads.c"), "-ldl"],
                   check=True)
    server = Nginx({})
    chunk = os.urandom(a.kib * 1024)
    names = [f"f{i:04d}.bin" for i in range(a.files)]
    for i, name in enumerate(names):
        with open(os.path.join(server.root, name), "wb") as f:
            f.write(chunk[i % 97:] + chunk[:i % 97])
    urls = os.path.join(work, "urls.txt")
    with open(urls, "w") as f:
        f.write("".join(server.url(n) + "\n" for n in names))
    config = os.path.join(work, "curl.cfg")
    with open(config, "w") as f:
        f.write("".join(f'url = "{server.url(n)}"\noutput = "{n}"\n' for n in names))
    j = str(a.jobs)
    clients = {
        "curl": ["curl", "-s", "--parallel", "--parallel-max", j, "-K", config],
        "haul": [os.path.abspath(a.haul), "get", "-q", "-j", j, "-d", ".", "-i", urls],
    }
    outs = os.path.join(a.out_dir, f"haul-bench-threads-{os.getpid()}")
    try:
        for run in range(a.runs):
            for name, cmd in shuffled(clients):
                out = os.path.join(outs, f"{name}-{run}")
                os.makedirs(out)
                env = dict(os.environ, LD_PRELOAD=preload,
                           HAUL_BENCH_THREADS_OUT=os.path.join(work, f"{name}.txt"))
                subprocess.run(cmd, cwd=out, env=env, check=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
                shutil.rmtree(out)
    finally:
        server.stop()
        shutil.rmtree(outs, ignore_errors=True)
    print(f"{a.files} files of {a.kib} KiB, -j{a.jobs}, medians of {a.runs}; nproc={os.cpu_count()}")
    for name in clients:
        threads, (load_start, load_end, first_connect, end) = summary(os.path.join(work, f"{name}.txt"))
        load = f"libcurl dlopen() {load_start:.1f}-{load_end:.1f} ms, " if load_end else ""
        print(f"{name}: {load}first connect {first_connect:.1f} ms, end {end:.1f} ms (after the preload's start)")
        for thread, (cpu, wait, slices) in sorted(threads.items(), key=lambda t: -t[1][0]):
            print(f"  {thread:18} cpu {cpu:7.1f} ms  waiting for a CPU {wait:6.1f} ms  slices {slices:6.0f}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
