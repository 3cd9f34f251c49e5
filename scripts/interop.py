#!/usr/bin/env python3
"""haul against real servers: nginx and lighttpd (installed with apt-get if missing).

Each server serves a private directory on 127.0.0.1; for each, haul (release build) must:
  1. download a 48 MiB file on one connection and on eight (SHA-256 checked);
  2. resume after kill -9, on one connection and on four, asking only for the rest;
  3. after kill -9 and a change of the file on the server (new content, new ETag), start over
     and end with the new file, never a mix, on one connection and on four;
  4. write the body to standard output (-o -);
  5. over HTTPS with HTTP/2 (nginx-h2), fetch eight ranges over eight connections (server's
     view): libcurl multiplexed them as streams of one connection, which a per-connection limit
     (a CDN's) shapes as one.
Not part of `swift test` (it needs the servers); prints one line per check and exits 1 on the
first failure.

usage: scripts/interop.py [--haul .build/release/haul] [--servers nginx,lighttpd,nginx-h2]
"""
import argparse, os, shutil, signal, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "Benchmarks"))
from common import ensure, free_port, sha256

SIZE = 48 << 20
HAUL, OPTIONS = None, []


class Server:
    """A real server on 127.0.0.1:port serving `root`, with an access log of ranges."""

    def __init__(self, kind):
        self.kind = kind
        self.work = tempfile.mkdtemp(prefix=f"haul-interop-{kind}-")
        os.chmod(self.work, 0o755)  # the servers' workers run as another user
        self.root = os.path.join(self.work, "www")
        os.makedirs(self.root)
        os.chmod(self.root, 0o755)
        self.port = free_port()
        self.log = os.path.join(self.work, "access.log")
        conf = os.path.join(self.work, f"{kind}.conf")
        self.tls = kind == "nginx-h2"
        # haul's options for this server: trust its self-signed certificate.
        self.options = []
        if kind in ("nginx", "nginx-h2"):
            binary = ensure("nginx", "nginx-light")
            listen = f"127.0.0.1:{self.port}"
            if self.tls:
                cert, key = os.path.join(self.work, "cert.pem"), os.path.join(self.work, "key.pem")
                subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                                "-out", cert, "-days", "2", "-subj", "/CN=127.0.0.1",
                                "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
                os.chmod(key, 0o644)
                listen += f" ssl http2; ssl_certificate {cert}; ssl_certificate_key {key}"
                self.options = ["--cacert", cert]
            with open(conf, "w") as f:
                f.write(f"""daemon off; worker_processes 1; pid {self.work}/nginx.pid; error_log {self.work}/error.log;
events {{ worker_connections 256; }}
http {{ log_format r '$status "$http_range" $connection'; access_log {self.log} r;
  limit_conn_zone $binary_remote_addr zone=perip:1m;
  server {{ listen {listen}; root {self.root}; limit_rate 16m;
    location /two/ {{ limit_conn perip 2; }} }} }}
""")
            cmd = [binary, "-c", conf, "-p", self.work]
        else:
            binary = ensure("lighttpd", "lighttpd")
            with open(conf, "w") as f:
                f.write(f"""server.document-root = "{self.root}"
server.bind = "127.0.0.1"
server.port = {self.port}
server.pid-file = "{self.work}/lighttpd.pid"
server.errorlog = "{self.work}/error.log"
server.modules = ("mod_accesslog")
accesslog.filename = "{self.log}"
accesslog.format = "%s \\"%{{Range}}i\\""
connection.kbytes-per-second = 16384
""")
            cmd = [binary, "-D", "-f", conf]
        open(self.log, "w").close()
        os.chmod(self.log, 0o666)
        self.process = subprocess.Popen(cmd)
        time.sleep(0.7)
        if self.process.poll() is not None:
            sys.exit(f"{kind} did not start")

    def url(self, name):
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}/{name}"

    def put(self, name, seed):
        """Writes a SIZE-byte file; different seeds give different content (and ETags)."""
        path = os.path.join(self.root, name)
        block = bytes((i * 131 + seed * 7) % 251 for i in range(1 << 16))
        with open(path, "wb") as f:
            for i in range(SIZE >> 16):
                f.write(block[i % 13:] + block[:i % 13])
        os.chmod(path, 0o644)
        os.utime(path, (time.time() - 1000 + seed, time.time() - 1000 + seed))  # a new Last-Modified
        return sha256(path)

    def ranges(self):
        def read():
            with open(self.log) as f:
                return [line.split('"')[1] for line in f if '"' in line]
        if self.kind != "lighttpd":
            return read()
        # lighttpd buffers its access log and writes it out on SIGHUP, a moment later (0.5 s
        # was once not enough): wait until two reads 0.5 s apart agree, at most 5 s.
        self.process.send_signal(signal.SIGHUP)
        seen, deadline = read(), time.monotonic() + 5
        while time.monotonic() < deadline:
            time.sleep(0.5)
            now = read()
            if now == seen and now:
                break
            seen = now
        return seen

    def connections(self):
        """The connection serial of each logged request (nginx)."""
        with open(self.log) as f:
            return [line.split()[-1] for line in f if '"' in line]

    def stop(self):
        self.process.terminate()
        self.process.wait()
        shutil.rmtree(self.work, ignore_errors=True)


def haul(args, **kw):
    return subprocess.run([HAUL, "get"] + OPTIONS + args, capture_output=True, text=True, timeout=300, **kw)


def interrupted(args, after, cwd):
    """Starts haul, kills it with SIGKILL after `after` seconds."""
    p = subprocess.Popen([HAUL, "get", "-q"] + OPTIONS + args, cwd=cwd, stderr=subprocess.DEVNULL)
    time.sleep(after)
    p.send_signal(signal.SIGKILL)
    p.wait()


def check(server, out):
    name = f"{server.kind}"
    failures = []

    def expect(ok, what):
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {what}")
        if not ok:
            failures.append(what)

    want = server.put("a.bin", 1)
    for x in ("1", "8"):
        dest = os.path.join(out, f"a{x}.bin")
        open(server.log, "w").close()
        r = haul(["-q", "-x", x, "-o", dest, server.url("a.bin")])
        expect(r.returncode == 0 and sha256(dest) == want, f"download -x {x} ({r.stderr.strip()[:80]})")
        if server.kind.startswith("nginx") and x == "8":
            used = len(set(server.connections()))
            expect(used == 8, f"-x 8 over 8 connections, server's view (saw {used})")

    if server.kind.startswith("nginx"):
        # A server that lets a client have two requests at once (limit_conn) turns the other
        # six connections away with 503: the download goes on over the two.
        os.makedirs(os.path.join(server.root, "two"), exist_ok=True)
        os.chmod(os.path.join(server.root, "two"), 0o755)
        os.link(os.path.join(server.root, "a.bin"), os.path.join(server.root, "two", "a.bin"))
        dest = os.path.join(out, "two.bin")
        open(server.log, "w").close()
        r = haul(["-q", "-x", "8", "-o", dest, server.url("two/a.bin")])
        statuses = [line.split()[0] for line in open(server.log) if '"' in line]
        expect(r.returncode == 0 and sha256(dest) == want and "503" in statuses,
               f"-x 8 where the server admits 2 at once ({statuses.count('503')} turned away; "
               f"{r.stderr.strip()[:80]})")

    for x in ("1", "4"):
        dest = os.path.join(out, f"r{x}.bin")
        open(server.log, "w").close()
        interrupted(["-x", x, "--limit-rate", "8M", "-o", dest, server.url("a.bin")], 2.0, out)
        kept = os.path.getsize(dest + ".part") if os.path.exists(dest + ".part") else 0
        before = len(server.ranges())
        r = haul(["-x", x, "-o", dest, server.url("a.bin")])
        resumed = [rng for rng in server.ranges()[before:] if rng not in ("-", "")]
        # One connection asks for the rest; four ask again for the probe's byte and the gaps.
        fresh = any(rng.startswith("bytes=0-") and x == "1" for rng in resumed)
        expect(r.returncode == 0 and sha256(dest) == want and kept > 0 and resumed and not fresh,
               f"resume after kill -9, -x {x} (.part {kept} bytes, rerun asked {resumed[:4]})")

    for x in ("1", "4"):
        dest = os.path.join(out, f"c{x}.bin")
        server.put("c.bin", 1)
        interrupted(["-x", x, "--limit-rate", "8M", "-o", dest, server.url("c.bin")], 2.0, out)
        changed = server.put("c.bin", 2)
        r = haul(["-x", x, "-o", dest, server.url("c.bin")])
        expect(r.returncode == 0 and sha256(dest) == changed,
               f"file changed after kill -9, -x {x}: the new file, whole ({r.stderr.strip().splitlines()[-1:]})")

    dest = os.path.join(out, "stdout.bin")
    with open(dest, "wb") as f:
        r = subprocess.run([HAUL, "get", "-q"] + OPTIONS + ["-o", "-", server.url("a.bin")], stdout=f, timeout=300)
    expect(r.returncode == 0 and sha256(dest) == want, "-o - to standard output")
    return failures


def main():
    global HAUL, OPTIONS
    ap = argparse.ArgumentParser()
    ap.add_argument("--haul", default=".build/release/haul")
    ap.add_argument("--servers", default="nginx,lighttpd,nginx-h2")
    a = ap.parse_args()
    HAUL = os.path.abspath(a.haul)
    failures = []
    for kind in a.servers.split(","):
        server = Server(kind)
        OPTIONS = server.options
        out = tempfile.mkdtemp(prefix="haul-interop-out-")
        try:
            failures += check(server, out)
        finally:
            server.stop()
            shutil.rmtree(out, ignore_errors=True)
    print("all checks passed" if not failures else f"{len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
