#!/usr/bin/env python3
"""haul serve with 1000 queued downloads: how fast the list API answers, and the daemon's memory.

A private nginx serves one 64 MiB file under 1000 names (links), paced to 100 KiB/s per
connection, so that the daemon runs its three at a time and keeps the rest queued. The
downloads are added in one POST; then `GET /api/v1/downloads?limit=1000` (the whole list) and
`?limit=100` (the page's first screen) are timed --runs times each on a kept-alive connection,
and the daemon's resident memory (VmRSS) and peak (VmHWM) are read from /proc.

Targets (issue 21): the list under 50 ms at the median, RSS under 64 MiB. Not part of `swift test`.

usage: Benchmarks/serve.py [--haul .build/release/haul] [--count 1000] [--runs 200]
"""
import argparse, http.client, json, os, shutil, signal, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Nginx, free_port


def memory(pid):
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            fields[name] = value.strip()
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--haul", default=".build/release/haul")
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=200)
    a = ap.parse_args()
    server = Nginx({"big.bin": 64}, limit_rate="100k")
    for i in range(a.count):
        os.symlink("big.bin", os.path.join(server.root, f"f{i}.bin"))
    work = tempfile.mkdtemp(prefix="haul-bench-serve-")
    root = os.path.join(work, "root")
    os.makedirs(root, mode=0o700)
    env = dict(os.environ, XDG_STATE_HOME=os.path.join(work, "state"), HOME=os.path.join(work, "home"))
    port = free_port()
    daemon = subprocess.Popen([os.path.abspath(a.haul), "serve", "--port", str(port), "-d", root], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    token_file = os.path.join(work, "state", "haul", "serve", "token")
    address = os.path.join(work, "state", "haul", "serve", "address")
    try:
        for _ in range(100):
            if os.path.exists(address):
                break
            time.sleep(0.05)
        else:
            sys.exit("haul serve did not start: " + daemon.stderr.read().decode())
        token = open(token_file).read().strip()
        headers = {"Host": f"127.0.0.1:{port}", "Authorization": "Bearer " + token}
        idle_rss, _ = memory(daemon.pid)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        body = json.dumps({"urls": [server.url(f"f{i}.bin") for i in range(a.count)]})
        start = time.monotonic()
        connection.request("POST", "/api/v1/downloads", body, dict(headers, **{"Content-Type": "application/json"}))
        answer = connection.getresponse()
        answer.read()
        add = time.monotonic() - start
        if answer.status != 201:
            sys.exit(f"the add answered {answer.status}")
        time.sleep(2)  # three running, the rest queued
        rows = []
        for limit in (a.count, 100):
            times = []
            for _ in range(a.runs):
                start = time.monotonic()
                connection.request("GET", f"/api/v1/downloads?limit={limit}", headers=headers)
                answer = connection.getresponse()
                listed = json.loads(answer.read())
                times.append(time.monotonic() - start)
                if answer.status != 200 or len(listed["downloads"]) != min(limit, a.count):
                    sys.exit(f"the list answered {answer.status} with {len(listed.get('downloads', []))}")
            rows.append((limit, statistics.median(times) * 1000, max(times) * 1000))
        running = sum(1 for d in listed["downloads"] if d["state"] == "running")
        rss, peak = memory(daemon.pid)
        start = time.monotonic()
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
        stop = time.monotonic() - start
    finally:
        if daemon.poll() is None:
            daemon.kill()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"haul serve, {a.count} downloads ({running} running), {a.runs} calls each, one kept-alive connection")
    print(f"add {a.count} URLs in one POST   {add * 1000:8.1f} ms")
    for limit, median, worst in rows:
        print(f"GET downloads?limit={limit:<5}      median {median:6.2f} ms   max {worst:6.2f} ms")
    print(f"RSS idle {idle_rss:.1f} MiB, with the list {rss:.1f} MiB, peak {peak:.1f} MiB")
    print(f"SIGTERM to exit                {stop * 1000:8.1f} ms")


if __name__ == "__main__":
    main()
