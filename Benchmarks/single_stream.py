#!/usr/bin/env python3
"""Single-connection download: haul vs curl from a local nginx, side by side in one run.

Installs nginx with apt-get if it is missing, serves a file of --size MiB from a private
directory on 127.0.0.1 (an unused port), and runs each client --runs times, alternating.
Reports the median wall time, CPU time (user+sys) and peak RSS per client and the ratios, and
checks every output's SHA-256 against the source. Not part of `swift test`.

usage: Benchmarks/single_stream.py [--size 1024] [--runs 3] [--haul .build/release/haul]
"""
import argparse, hashlib, os, shutil, socket, statistics, subprocess, sys, tempfile, time

def ensure_nginx():
    if shutil.which("nginx") or os.path.exists("/usr/sbin/nginx"):
        return "/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else shutil.which("nginx")
    subprocess.run(["apt-get", "update", "-qq"], check=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", "nginx-light"], check=True,
                   env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    return "/usr/sbin/nginx"

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()

def measure(cmd):
    start = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - start
    if status != 0:
        sys.exit(f"{cmd[0]} failed with status {status}")
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=1024, help="MiB")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--haul", default=".build/release/haul")
    a = ap.parse_args()
    nginx = ensure_nginx()
    work = tempfile.mkdtemp(prefix="haul-bench-")
    os.chmod(work, 0o755)  # nginx workers run as another user
    root = os.path.join(work, "www"); os.makedirs(root)
    src = os.path.join(root, "file.bin")
    with open(src, "wb") as f:
        chunk = os.urandom(1 << 20)
        for i in range(a.size):
            f.write(chunk[i % 7:] + chunk[:i % 7])
    want = sha256(src)
    port = free_port()
    conf = os.path.join(work, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""daemon off; worker_processes 1; pid {work}/nginx.pid; error_log {work}/error.log;
events {{ worker_connections 1024; }}
http {{ access_log off; sendfile on; tcp_nopush on;
  server {{ listen 127.0.0.1:{port}; root {root}; }} }}
""")
    server = subprocess.Popen([nginx, "-c", conf, "-p", work])
    time.sleep(0.5)
    url = f"http://127.0.0.1:{port}/file.bin"
    out = os.path.join(work, "out.bin")
    clients = {
        "curl": ["curl", "-sf", "-o", out, url],
        "haul": [a.haul, "get", "-q", "--overwrite", "-o", out, url],
    }
    results = {k: [] for k in clients}
    try:
        for _ in range(a.runs):
            for name, cmd in clients.items():
                if os.path.exists(out): os.remove(out)
                subprocess.run(["sync"])
                results[name].append(measure(cmd))
                if sha256(out) != want:
                    sys.exit(f"{name}: SHA-256 mismatch")
    finally:
        server.terminate(); server.wait()
        shutil.rmtree(work, ignore_errors=True)
    med = {k: [statistics.median(x[i] for x in v) for i in range(3)] for k, v in results.items()}
    print(f"{a.size} MiB from nginx on 127.0.0.1, 1 connection, median of {a.runs}; nproc={os.cpu_count()}")
    print(f"{'client':8} {'wall s':>8} {'cpu s':>8} {'rss MiB':>8}")
    for k, (w, c, r) in med.items():
        print(f"{k:8} {w:8.2f} {c:8.2f} {r:8.1f}")
    print(f"haul/curl: wall {med['haul'][0]/med['curl'][0]:.2f}x, cpu {med['haul'][1]/med['curl'][1]:.2f}x; all SHA-256 ok")

if __name__ == "__main__":
    main()
