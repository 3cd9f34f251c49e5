#!/usr/bin/env python3
"""Segmented download: haul -x N vs aria2c -x N -s N on a per-connection throttled nginx.

Servers that cap each connection are where splitting pays; nginx's `limit_rate` plays one.
Installs nginx and aria2 with apt-get if missing. Medians of --runs, every output's SHA-256
checked. Not part of `swift test`.

usage: Benchmarks/segmented.py [--size 256] [--connections 8] [--limit 4m] [--runs 3]
"""
import argparse, os, shutil, statistics, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Nginx, ensure, measure, sha256, shuffled


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=256, help="MiB")
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--limit", default="4m", help="nginx limit_rate per connection")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--haul", default=".build/release/haul")
    a = ap.parse_args()
    aria2 = ensure("aria2c", "aria2")
    server = Nginx({"file.bin": a.size}, limit_rate=a.limit)
    out = tempfile.mkdtemp(prefix="haul-bench-out-")
    target = os.path.join(out, "file.bin")
    n = str(a.connections)
    clients = {
        "aria2c": [aria2, "-q", "-x", n, "-s", n, "-k", "1M", "--allow-overwrite=true", "--file-allocation=falloc",
                   "-d", out, "-o", "file.bin", server.url("file.bin")],
        "haul": [os.path.abspath(a.haul), "get", "-q", "--overwrite", "-x", n, "-o", target, server.url("file.bin")],
    }
    results = {k: [] for k in clients}
    try:
        for _ in range(a.runs):
            for name, cmd in shuffled(clients):
                for leftover in (target, target + ".aria2"):
                    if os.path.exists(leftover):
                        os.remove(leftover)
                results[name].append(measure(cmd))
                if sha256(target) != server.sums["file.bin"]:
                    sys.exit(f"{name}: SHA-256 mismatch")
    finally:
        server.stop()
        shutil.rmtree(out, ignore_errors=True)  # 256 MiB per run otherwise left in /tmp
    med = {k: [statistics.median(x[i] for x in v) for i in range(3)] for k, v in results.items()}
    print(f"{a.size} MiB, {a.connections} connections, nginx limit_rate {a.limit} per connection, "
          f"median of {a.runs}; nproc={os.cpu_count()}")
    print(f"{'client':8} {'wall s':>8} {'cpu s':>8} {'rss MiB':>8}")
    for k, (w, c, r) in med.items():
        print(f"{k:8} {w:8.2f} {c:8.2f} {r:8.1f}")
    print(f"haul/aria2c: wall {med['haul'][0] / med['aria2c'][0]:.2f}x, cpu {med['haul'][1] / med['aria2c'][1]:.2f}x; "
          "all SHA-256 ok")


if __name__ == "__main__":
    main()
