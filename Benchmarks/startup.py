#!/usr/bin/env python3
"""Start-up: what a script that runs the tool once per file pays.

Rows (medians; the clients alternate within each round, so a busy moment bills all alike):
  --version              curl --version vs haul --version: wall and peak RSS
  one 1 KiB file         a fresh process per download, --count in a row, from a local nginx:
                         curl, wget, aria2c and haul, each writing a new file in --out-dir

Wall times are taken without a wrapper (GNU time's own start would add 1.5 ms to each); peak
RSS comes from GNU time in separate runs (see common.measure). Every file's SHA-256 is checked.
Not part of `swift test`.

usage: Benchmarks/startup.py [--count 100] [--rounds 3] [--haul .build/release/haul] [--out-dir /dev/shm]
"""
import argparse, os, shutil, statistics, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Nginx, ensure, measure, sha256, shuffled, timed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=100, help="downloads per client per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--haul", default=".build/release/haul")
    ap.add_argument("--out-dir", default="/dev/shm" if os.path.isdir("/dev/shm") else None,
                    help="where the files go (default /dev/shm: the process start, not the disk)")
    a = ap.parse_args()
    haul = os.path.abspath(a.haul)
    aria2 = ensure("aria2c", "aria2")
    wget = ensure("wget", "wget")
    server = Nginx({})
    with open(os.path.join(server.root, "one.bin"), "wb") as f:
        f.write(os.urandom(1024))
    want = sha256(os.path.join(server.root, "one.bin"))
    url = server.url("one.bin")
    work = tempfile.mkdtemp(prefix="haul-bench-start-", dir=a.out_dir)
    fetchers = {
        "curl": lambda out: ["curl", "-s", "-o", out, url],
        "wget": lambda out: [wget, "-q", "-O", out, url],
        "aria2c": lambda out: [aria2, "-q", "--allow-overwrite=true", "--file-allocation=none",
                               "-d", os.path.dirname(out), "-o", os.path.basename(out), url],
        "haul": lambda out: [haul, "get", "-q", "-o", out, url],
    }
    versions = {"curl": ["curl", "--version"], "haul": [haul, "--version"]}
    walls = {k: [] for k in fetchers}
    version_walls = {k: [] for k in versions}
    try:
        for r in range(a.rounds):
            for name, cmd in shuffled(versions):
                version_walls[name] += [timed(cmd) for _ in range(a.count)]
            for name, make in shuffled(fetchers):
                for i in range(a.count):
                    out = os.path.join(work, f"{name}-{r}-{i}.bin")
                    walls[name].append(timed(make(out)))
                    if sha256(out) != want:
                        sys.exit(f"{name}: {out} differs")
                    os.unlink(out)
        version_rss = {k: statistics.median(measure(c)[2] for _ in range(5)) for k, c in versions.items()}
        fetch_rss = {}
        for name, make in fetchers.items():
            rss = []
            for i in range(5):
                out = os.path.join(work, f"{name}-rss-{i}.bin")
                rss.append(measure(make(out))[2])
                os.unlink(out)
            fetch_rss[name] = statistics.median(rss)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    ms = lambda xs: 1000 * statistics.median(xs)
    print(f"start-up, medians of {a.rounds} rounds x {a.count}; nproc={os.cpu_count()}; out-dir {a.out_dir}")
    print(f"{'--version':10} {'wall ms':>8} {'rss MiB':>8}")
    for k in versions:
        print(f"{k:10} {ms(version_walls[k]):8.1f} {version_rss[k]:8.1f}")
    print(f"{'1 KiB file':10} {'wall ms':>8} {'rss MiB':>8}")
    for k in fetchers:
        print(f"{k:10} {ms(walls[k]):8.1f} {fetch_rss[k]:8.1f}")
    print(f"haul/curl: --version {ms(version_walls['haul']) / ms(version_walls['curl']):.2f}x, "
          f"1 KiB file {ms(walls['haul']) / ms(walls['curl']):.2f}x; all SHA-256 ok")


if __name__ == "__main__":
    main()
