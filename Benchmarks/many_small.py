#!/usr/bin/env python3
"""Many small files: haul -j16 vs aria2c -j16 vs curl --parallel --parallel-max 16.

1000 files of 16 KiB from a local nginx (installed with apt-get if missing, as is aria2).
Medians of --runs, and the median of each round's ratio (paired: a sitting that drifts moves
both sides of a round together); every output's SHA-256 checked. Not part of `swift test`.

usage: Benchmarks/many_small.py [--files 1000] [--kib 16] [--jobs 16] [--runs 3] [--connections N]
"""
import argparse, os, shutil, statistics, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Nginx, ensure, measure, sha256, shuffled, small_files


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--kib", type=int, default=16)
    ap.add_argument("--jobs", type=int, default=16)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--haul", default=".build/release/haul")
    ap.add_argument("--connections", type=int, help="haul's -x (default: haul's own default, 4; "
                    "the library's default is 1)")
    ap.add_argument("--out-dir", help="where the files go (default: a temporary directory on disk; "
                    "/dev/shm shows the cost without fsync)")
    a = ap.parse_args()
    aria2 = ensure("aria2c", "aria2")
    server = Nginx({})
    work = tempfile.mkdtemp(prefix="haul-bench-many-")
    names, sums, urls, curl_config = small_files(server, work, a.files, a.kib)
    # Every run writes to a directory of its own, and all are removed at the end: deleting a
    # thousand files right before the next client starts made ext4 skip the recently freed inodes
    # one by one when it allocated new ones (perf: recently_deleted), a cost that grew run after run
    # and had nothing to do with the client that paid it.
    outs = os.path.join(a.out_dir, f"haul-bench-many-{os.getpid()}") if a.out_dir else os.path.join(work, "out")
    j = str(a.jobs)
    clients = {
        "curl": ["curl", "-s", "--parallel", "--parallel-max", j, "-K", curl_config],
        "aria2c": [aria2, "-q", "-j", j, "--allow-overwrite=true", "--file-allocation=none", "-d", ".", "-i", urls],
        "haul": [os.path.abspath(a.haul), "get", "-q", "-j", j, "-d", ".", "-i", urls]
        + (["-x", str(a.connections)] if a.connections else []),
    }
    results = {k: [] for k in clients}
    try:
        for run in range(a.runs):
            for name, cmd in shuffled(clients):
                out = os.path.join(outs, f"{name}-{run}")
                os.makedirs(out)
                os.sync()  # the previous client's writeback must not bill this one
                results[name].append(measure(cmd, cwd=out))
                for n in names:
                    if sha256(os.path.join(out, n)) != sums[n]:
                        sys.exit(f"{name}: {n} differs")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(outs, ignore_errors=True)
    med = {k: [statistics.median(x[i] for x in v) for i in range(3)] for k, v in results.items()}
    print(f"{a.files} files of {a.kib} KiB, {a.jobs} in parallel, median of {a.runs}; nproc={os.cpu_count()}")
    print(f"{'client':8} {'wall s':>8} {'cpu s':>8} {'rss MiB':>8}")
    for k, (w, c, r) in med.items():
        print(f"{k:8} {w:8.2f} {c:8.2f} {r:8.1f}")
    h = med["haul"][0]
    print(f"haul/aria2c wall {h / med['aria2c'][0]:.2f}x, haul/curl wall {h / med['curl'][0]:.2f}x; all SHA-256 ok")
    # The same ratios taken round by round (each client ran once a round, in a shuffled order):
    # a sitting whose speed drifts moves both sides of a round together.
    paired = {k: statistics.median(a[0] / b[0] for a, b in zip(results["haul"], results[k]))
              for k in ("aria2c", "curl")}
    print(f"paired, median of each round's ratio: haul/aria2c wall {paired['aria2c']:.2f}x, "
          f"haul/curl wall {paired['curl']:.2f}x")


if __name__ == "__main__":
    main()
