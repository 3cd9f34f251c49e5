#!/usr/bin/env python3
"""Single-connection download: haul vs curl from a local nginx, side by side in one run.

Installs nginx with apt-get if it is missing, serves a file of --size MiB from a private
directory on 127.0.0.1 (an unused port), and runs each client --runs times, alternating.
Reports the median wall time, CPU time (user+sys) and peak RSS per client and the ratios, and
checks every output's SHA-256 against the source. Not part of `swift test`.

usage: Benchmarks/single_stream.py [--size 1024] [--runs 3] [--haul .build/release/haul]
"""
import argparse, os, shutil, statistics, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Nginx, measure, sha256, shuffled


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=1024, help="MiB")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--haul", default=".build/release/haul")
    a = ap.parse_args()
    server = Nginx({"file.bin": a.size})
    url = server.url("file.bin")
    want = server.sums["file.bin"]
    # Write to a tmpfs when there is one with room, so disk writeback does not dominate the
    # comparison (both clients write the same bytes either way).
    shm = "/dev/shm"
    roomy = os.path.isdir(shm) and shutil.disk_usage(shm).free > (a.size + 64) << 20
    out = os.path.join(shm if roomy else server.work, f"haul-bench-{os.getpid()}.bin")
    clients = {
        "curl": ["curl", "-sf", "-o", out, url],
        "haul": [a.haul, "get", "-q", "-x", "1", "--overwrite", "-o", out, url],  # one connection, like curl
    }
    results = {k: [] for k in clients}
    try:
        for _ in range(a.runs):
            for name, cmd in shuffled(clients):
                if os.path.exists(out): os.remove(out)
                subprocess.run(["sync"])
                results[name].append(measure(cmd))
                if sha256(out) != want:
                    sys.exit(f"{name}: SHA-256 mismatch")
    finally:
        server.stop()
        for leftover in (out, out + ".haul", out + ".part"):
            if os.path.exists(leftover):
                os.remove(leftover)
    med = {k: [statistics.median(x[i] for x in v) for i in range(3)] for k, v in results.items()}
    print(f"{a.size} MiB from nginx on 127.0.0.1, 1 connection, median of {a.runs}; nproc={os.cpu_count()}")
    print(f"{'client':8} {'wall s':>8} {'cpu s':>8} {'rss MiB':>8}")
    for k, (w, c, r) in med.items():
        print(f"{k:8} {w:8.2f} {c:8.2f} {r:8.1f}")
    print(f"haul/curl: wall {med['haul'][0]/med['curl'][0]:.2f}x, cpu {med['haul'][1]/med['curl'][1]:.2f}x; all SHA-256 ok")

if __name__ == "__main__":
    main()
