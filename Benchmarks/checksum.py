#!/usr/bin/env python3
"""What a checksum costs: a --size MiB download from a local nginx with and without
`--checksum`, on one connection (hashed while writing) and on four (hashed in a final pass),
beside aria2c's --checksum and coreutils' own hashing of the same file, in one run.

Installs nginx and aria2 with apt-get if missing; writes to /dev/shm when it has room (so the
disk does not dominate). Reports the median wall and CPU time of each row and the cost per GiB
of each algorithm (wall with the checksum minus wall without). Not part of `swift test`.

usage: Benchmarks/checksum.py [--size 1024] [--runs 3] [--haul .build/release/haul]
"""
import argparse, hashlib, os, shutil, statistics, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Nginx, ensure, measure, sha256


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=1024, help="MiB")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--haul", default=".build/release/haul")
    a = ap.parse_args()
    aria2 = ensure("aria2c", "aria2")
    server = Nginx({"file.bin": a.size})
    url = server.url("file.bin")
    source = os.path.join(server.root, "file.bin")
    digests = {}
    for name, algo in (("sha-256", "sha256"), ("sha-512", "sha512"), ("sha-1", "sha1"), ("md5", "md5")):
        h = hashlib.new(algo)
        with open(source, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        digests[name] = h.hexdigest()
    shm = "/dev/shm"
    roomy = os.path.isdir(shm) and shutil.disk_usage(shm).free > (a.size + 64) << 20
    work = shm if roomy else server.work
    out = os.path.join(work, f"haul-bench-{os.getpid()}.bin")
    haul = lambda x, *sums: [a.haul, "get", "-q", "-x", str(x), "--overwrite", "-o", out, url] + [
        f"--checksum={s}={digests[s]}" for s in sums]
    rows = {
        "haul -x1": haul(1),
        "haul -x1 sha-256": haul(1, "sha-256"),
        "haul -x1 sha-512": haul(1, "sha-512"),
        "haul -x1 sha-1": haul(1, "sha-1"),
        "haul -x1 md5": haul(1, "md5"),
        "haul -x1 all four": haul(1, "sha-256", "sha-512", "sha-1", "md5"),
        "haul -x4": haul(4),
        "haul -x4 sha-256": haul(4, "sha-256"),
        "aria2c -x1": [aria2, "-q", "-x1", "-s1", "--allow-overwrite=true", "--auto-file-renaming=false",
                       "-d", work, "-o", os.path.basename(out), url],
        "aria2c -x1 sha-256": [aria2, "-q", "-x1", "-s1", "--allow-overwrite=true", "--auto-file-renaming=false",
                               f"--checksum=sha-256={digests['sha-256']}", "-d", work, "-o", os.path.basename(out), url],
        "sha256sum": ["sha256sum", source],
        "sha512sum": ["sha512sum", source],
        "sha1sum": ["sha1sum", source],
        "md5sum": ["md5sum", source],
    }
    results = {k: [] for k in rows}
    try:
        for _ in range(a.runs):
            for name, cmd in rows.items():
                if os.path.exists(out): os.remove(out)
                results[name].append(measure(cmd))
                if not name.endswith("sum") and sha256(out) != digests["sha-256"]:
                    sys.exit(f"{name}: SHA-256 mismatch")
    finally:
        server.stop()
        for leftover in (out, out + ".haul", out + ".part", out + ".aria2"):
            if os.path.exists(leftover): os.remove(leftover)
    med = {k: [statistics.median(x[i] for x in v) for i in range(2)] for k, v in results.items()}
    gib = a.size / 1024
    print(f"{a.size} MiB from nginx on 127.0.0.1, median of {a.runs}; nproc={os.cpu_count()}")
    print(f"{'row':20} {'wall s':>8} {'cpu s':>8} {'+wall s/GiB':>12}")
    for k, (w, c) in med.items():
        base = "haul -x4" if k.startswith("haul -x4") else "aria2c -x1" if k.startswith("aria2c") else "haul -x1"
        extra = "" if k.endswith("sum") or k == base else f"{(w - med[base][0]) / gib:12.2f}"
        print(f"{k:20} {w:8.2f} {c:8.2f} {extra}")


if __name__ == "__main__":
    main()
