#!/usr/bin/env python3
"""Reproduce issue 17's findings (hostile servers, planted files) against a `haul` binary.

Stdlib only, Python 3.11; nothing leaves 127.0.0.1.

Usage: python3 scripts/hostile.py .build/debug/haul
Prints one line per check -- "finding N: VULNERABLE|SAFE|ERROR (reason)" -- and exits 0.
Every check gets its own temp dir and its own HTTP/1.1 server on 127.0.0.1:0.
"""
import email.utils, json, os, random, re, shutil, subprocess, sys, tempfile, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

MiB = 1 << 20
TIMEOUT = 60
LAST_MODIFIED = email.utils.formatdate(1_700_000_000, usegmt=True)


def content(name, n):
    """Deterministic pseudo-random bytes for a named file."""
    return random.Random(name).randbytes(n)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def write_file(path, data):
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# ---------------------------------------------------------------- HTTP server
def send_head(h, status, headers):
    h.send_response(status)
    for k, v in headers:
        h.send_header(k, str(v))
    h.end_headers()


def simple(h, send_body, status, body):
    send_head(h, status, [("Content-Type", "text/plain"), ("Content-Length", len(body))])
    if send_body:
        h.wfile.write(body)


def parse_range(value, total):
    """None = no usable Range; "bad" = unsatisfiable; else (start, end) inclusive."""
    m = re.fullmatch(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", value or "")
    if not m or not (m.group(1) or m.group(2)):
        return None
    a, b = m.groups()
    if not a:  # suffix range bytes=-n
        n = int(b)
        return (max(0, total - n), total - 1) if n else "bad"
    start = int(a)
    end = min(int(b), total - 1) if b else total - 1
    return (start, end) if start <= end and start < total else "bad"


def static(data, etag):
    """A route serving `data` with ETag/Last-Modified and Range (200/206/416) support."""
    total, view = len(data), memoryview(data)

    def route(h, send_body):
        rng = parse_range(h.headers.get("Range"), total)
        if_range = h.headers.get("If-Range")
        if if_range is not None and if_range not in (etag, LAST_MODIFIED):
            rng = None  # validator mismatch: send the whole entity
        common = [("ETag", etag), ("Last-Modified", LAST_MODIFIED), ("Accept-Ranges", "bytes"),
                  ("Content-Type", "application/octet-stream")]
        if rng == "bad":
            send_head(h, 416, common + [("Content-Range", f"bytes */{total}"), ("Content-Length", 0)])
            return
        if rng is None:
            send_head(h, 200, common + [("Content-Length", total)])
            body = view
        else:
            s, e = rng
            send_head(h, 206, common + [("Content-Range", f"bytes {s}-{e}/{total}"),
                                        ("Content-Length", e - s + 1)])
            body = view[s:e + 1]
        if send_body:
            for i in range(0, len(body), 64 * 1024):
                h.wfile.write(body[i:i + 64 * 1024])
    return route


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args): pass
    def do_GET(self): self._dispatch(True)
    def do_HEAD(self): self._dispatch(False)

    def _dispatch(self, send_body):
        path = urlsplit(self.path).path
        self.server.log.append({"method": self.command, "path": path,
                                "headers": list(self.headers.items())})
        route = self.server.routes.get(path)
        try:
            if route is None:
                simple(self, send_body, 404, b"not found\n")
            else:
                route(self, send_body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address): pass  # keep stderr clean


class Server:
    """Context manager: threaded server; routes may be added after start (URL needs the port)."""

    def __init__(self, routes=None):
        self.routes = dict(routes or {})

    def __enter__(self):
        self.httpd = QuietServer(("127.0.0.1", 0), Handler)
        self.httpd.routes, self.httpd.log = self.routes, []
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()
        self.base = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    def url(self, path): return self.base + path

    def requests(self, path=None):
        return [r for r in list(self.httpd.log) if path is None or r["path"] == path]


def throttled(data, etag, per_connection, sent=None):
    """`static` at `per_connection` bytes/s per answer; appends [start, bytes sent] to `sent`."""
    total, view = len(data), memoryview(data)

    def route(h, send_body):
        rng = parse_range(h.headers.get("Range"), total)
        s, e = rng if isinstance(rng, tuple) else (0, total - 1)
        head = [("ETag", etag), ("Last-Modified", LAST_MODIFIED), ("Accept-Ranges", "bytes"),
                ("Content-Type", "application/octet-stream"), ("Content-Length", e - s + 1)]
        if isinstance(rng, tuple):
            head.append(("Content-Range", f"bytes {s}-{e}/{total}"))
        send_head(h, 206 if isinstance(rng, tuple) else 200, head)
        if not send_body:
            return
        entry = [s, 0]
        if sent is not None:
            sent.append(entry)
        step = 64 * 1024
        for i in range(s, e + 1, step):
            h.wfile.write(view[i:min(i + step, e + 1)])
            entry[1] += min(step, e + 1 - i)
            threading.Event().wait(step / per_connection)
    return route


# ---------------------------------------------------------------- haul helpers
class Result:
    def __init__(self, rc, out, err):
        self.rc, self.out, self.err = rc, out, err

    def __str__(self):
        s = "timeout" if self.rc is None else f"rc={self.rc}"
        lines = self.err.decode(errors="replace").strip().splitlines()
        return s + (f", stderr: {lines[0][:80]!r}" if lines else "")


def run_haul(haul, *args):
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    try:
        p = subprocess.run([haul, *args], env=env, stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=TIMEOUT)
        return Result(p.returncode, p.stdout, p.stderr)
    except subprocess.TimeoutExpired as e:
        return Result(None, e.stdout or b"", e.stderr or b"")


def killed_download(haul, args, seconds):
    """Runs `haul *args` and kills it (SIGKILL) after `seconds`: leaves haul's own partial and
    record, in whatever format that haul writes."""
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    p = subprocess.Popen([haul, *args], env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    threading.Event().wait(seconds)
    p.kill()
    p.wait()


def edit_record(path, change):
    """Rewrites haul's JSON record at `path` through `change(dict)`, in place (same inode is not
    needed: the record binds the partial, not itself)."""
    rec = json.loads(read(path))
    change(rec)
    write_file(path, json.dumps(rec))


def record(url, etag, total, have):
    """Version-1 resume record claiming bytes [0, have) are done (ends are exclusive)."""
    return json.dumps({"etag": etag, "ranges": [{"end": have, "start": 0}],
                       "totalLength": total, "url": url, "validated": True, "version": 1},
                      sort_keys=True, separators=(",", ":"))


def plant(d, name, part_bytes, rec):
    write_file(os.path.join(d, name + ".part"), part_bytes)
    write_file(os.path.join(d, name + ".haul"), rec)


def range_starts(reqs):
    out = []
    for q in reqs:
        for k, v in q["headers"]:
            m = re.match(r"\s*bytes\s*=\s*(\d+)\s*-", v) if k.lower() == "range" else None
            if m:
                out.append(int(m.group(1)))
    return out


# ---------------------------------------------------------------- checks
def check1(haul, root):
    """Downloading a hostile `.part` + `.haul` pair plants a resume state for another URL."""
    total = 3_000_000
    real = content("trusted/setup.sh", total)
    with Server() as srv:
        trusted = srv.url("/trusted/setup.sh")
        srv.routes["/trusted/setup.sh"] = static(real, '"t1"')
        srv.routes["/evil/setup.sh.part"] = static(b"A" * total, '"e1"')
        srv.routes["/evil/setup.sh.haul"] = static(record(trusted, '"t1"', total, total - 1).encode(), '"e2"')
        r1 = run_haul(haul, "get", "-q", "-x", "1", "-d", root,
                      srv.url("/evil/setup.sh.part"), srv.url("/evil/setup.sh.haul"))
        after1 = sorted(os.listdir(root))
        r2 = run_haul(haul, "get", "-q", "-x", "1", "-d", root, trusted)
        starts = range_starts(srv.requests("/trusted/setup.sh"))
    out = os.path.join(root, "setup.sh")
    if os.path.isfile(out) and read(out) != real:
        return True, f"setup.sh differs from trusted content (planted bytes renamed into place); {r2}"
    if total - 1 in starts:
        return True, f"trusted server got Range starting at {total - 1} (forged record trusted); {r2}"
    # haul's own record, its partial replaced by another file: the record must not count for it.
    sub = os.path.join(root, "bound")
    os.mkdir(sub)
    with Server({"/big.bin": throttled(real, '"t1"', 1_000_000)}) as srv:
        args = ["get", "-q", "-x", "1", "-d", sub, srv.url("/big.bin")]
        killed_download(haul, args, 1.5)
        part = os.path.join(sub, "big.bin.part")
        size = os.path.getsize(part) if os.path.isfile(part) else 0
        os.unlink(part)
        write_file(part, b"B" * size)  # another file at the partial's name
        r3 = run_haul(haul, *args)
    got = read(os.path.join(sub, "big.bin")) if os.path.isfile(os.path.join(sub, "big.bin")) else None
    if got is not None and got != real:
        return True, f"a record bound to nothing checked its partial: planted bytes saved as big.bin; {r3}"
    return False, (f"first run ({r1}) saved {after1}; after second ({r2}): {sorted(os.listdir(root))};"
                   f" replaced partial: {r3}")


def check2(haul, root):
    """CR LF inside the record's etag must not reach the request headers."""
    total = 3_000_000
    data = content("f.bin", total)
    with Server({"/f.bin": throttled(data, '"v1"', 1_000_000)}) as srv:
        url = srv.url("/f.bin")
        args = ["get", "-q", "-x", "1", "-o", os.path.join(root, "f.bin"), url]
        killed_download(haul, args, 1.5)  # haul's own record, bound to its partial
        edit_record(os.path.join(root, "f.bin.haul"), lambda rec: rec.update(etag='"v1"\r\nX-Injected: yes'))
        srv.httpd.log.clear()
        r = run_haul(haul, *args)
        reqs = srv.requests()
    hits = [q for q in reqs if any(k.lower() == "x-injected" or "x-injected" in v.lower()
                                   for k, v in q["headers"])]
    if hits:
        first = f"{hits[0]['method']} {hits[0]['path']}"
        return True, f"X-Injected header seen in {len(hits)} request(s), e.g. {first}; {r}"
    why = "record refused (exit 5)" if r.rc == 5 else f"no X-Injected header in {len(reqs)} request(s) of the rerun"
    return False, f"{why}; {r}"


def check3(haul, root):
    """`-o big.iso` for a different URL must not destroy big.iso's partial download."""
    big, small = content("big.iso", 3_000_000), content("small.bin", 3000)
    with Server({"/big.iso": throttled(big, '"b1"', 1_000_000), "/small.bin": static(small, '"s1"')}) as srv:
        killed_download(haul, ["get", "-q", "-x", "1", "-o", os.path.join(root, "big.iso"), srv.url("/big.iso")], 1.5)
        part, out = os.path.join(root, "big.iso.part"), os.path.join(root, "big.iso")
        before = read(part) if os.path.isfile(part) else None
        r = run_haul(haul, "get", "-q", "-o", os.path.join(root, "big.iso"), srv.url("/small.bin"))
    part_intact = before is not None and os.path.isfile(part) and read(part) == before
    holds_small = os.path.isfile(out) and read(out) == small
    if r.rc == 0 and (not part_intact or holds_small):
        what = "big.iso.part gone/altered" if not part_intact else "big.iso.part kept"
        return True, f"{what}, big.iso {'holds the small file' if holds_small else 'not the small file'}; {r}"
    return False, f"big.iso.part {'intact' if part_intact else 'gone/altered'}; {r}"


def check4(haul, root):
    """A server sending 1000 bytes per claimed range must not make haul allocate ~200 MB."""
    total, chunk = 200_000_000, content("claim.bin", 1000)

    def claim(h, send_body):
        rng = parse_range(h.headers.get("Range"), total)
        s, e = rng if isinstance(rng, tuple) else (0, total - 1)
        send_head(h, 206, [("Content-Range", f"bytes {s}-{e}/{total}"), ("Content-Length", e - s + 1),
                           ("ETag", '"c1"'), ("Last-Modified", LAST_MODIFIED), ("Accept-Ranges", "bytes"),
                           ("Content-Type", "application/octet-stream")])
        if send_body:
            h.wfile.write(chunk)
        h.close_connection = True  # drop the connection mid-body

    with Server({"/claim.bin": claim}) as srv:
        for _ in range(3):  # a rerun resumes the partial, already sparse at the claimed total
            r = run_haul(haul, "get", "-q", "-x", "4", "-d", root, srv.url("/claim.bin"),
                         "--retries", "1", "--retry-delay", "0.05")
        nreq = len(srv.requests("/claim.bin"))
    part = os.path.join(root, "claim.bin.part")
    if not os.path.exists(part):
        return False, f"no claim.bin.part left ({sorted(os.listdir(root))}); {nreq} requests; {r}"
    st = os.stat(part)
    alloc = st.st_blocks * 512
    # Allowed: the bytes the server sent (1000 per request) plus the 64 MiB haul reserves ahead of
    # them, plus what the file system allocates around writes at four places (up to 2 MiB each).
    allowed = nreq * len(chunk) + 64 * MiB + 8 * MiB
    desc = f"claim.bin.part allocates {alloc / MiB:.1f} MiB (size {st.st_size}) after 3 runs, {nreq} requests; {r}"
    return alloc > allowed, desc


def check5(haul, root):
    """A hard-linked `.part` must not be written through to the other name."""
    data = content("out.bin", 3_000_000)
    notes = []
    with Server({"/out.bin": static(data, '"o1"')}) as srv:
        for label, extra in (("without --overwrite", []), ("with --overwrite", ["--overwrite"])):
            sub = tempfile.mkdtemp(dir=root)
            d, other = os.path.join(sub, "dl"), os.path.join(sub, "other")
            os.mkdir(d), os.mkdir(other)
            victim = os.path.join(other, "victim")
            write_file(victim, b"keep me")
            os.link(victim, os.path.join(d, "out.bin.part"))
            r = run_haul(haul, "get", "-q", "-x", "1", *extra, "-o", os.path.join(d, "out.bin"), srv.url("/out.bin"))
            now = read(victim)
            if now != b"keep me":
                return True, f"run {label} wrote through the hard link: victim now {len(now)} bytes; {r}"
            notes.append(f"{label}: {r}")
    return False, "victim intact; " + "; ".join(notes)


def check8(haul, root):
    """A 404 should be requested once, not once per connection."""
    with Server({"/gone": lambda h, b: simple(h, b, 404, b"gone\n")}) as srv:
        r = run_haul(haul, "get", "-q", "-d", root, srv.url("/gone"))
        reqs = srv.requests("/gone")
    methods = ", ".join(q["method"] for q in reqs)
    if len(reqs) > 1:
        return True, f"two requests: server saw {len(reqs)} requests for /gone ({methods}); {r}"
    return False, f"{len(reqs)} request(s) for /gone ({methods}); {r}"


def check9(haul, root):
    """Malformed / overflowing Content-Length must be rejected, not saved."""
    body = content("cl", 37)

    def bad_length(value):
        def route(h, send_body):
            send_head(h, 200, [("Content-Type", "application/octet-stream"), ("Content-Length", value)])
            if send_body:
                h.wfile.write(body)
            h.close_connection = True
        return route

    cases = [("/cl", "0x25", "cl.bin"), ("/cl2", "99999999999999999999999", "cl2.bin")]
    bad, notes = [], []
    with Server({p: bad_length(v) for p, v, _ in cases}) as srv:
        for path, value, name in cases:
            out = os.path.join(root, name)
            r = run_haul(haul, "get", "-q", "-x", "1", "-o", out, srv.url(path))
            size = os.path.getsize(out) if os.path.isfile(out) else None
            notes.append(f"Content-Length {value}: {r}" + (f", saved {size} bytes" if size is not None else ""))
            if r.rc == 0:
                bad.append(notes[-1])
    if bad:
        return True, "exit 0 with " + "; ".join(bad)
    return False, "; ".join(notes)


def check6(haul, root):
    """A Content-Disposition that does not parse (RFC 6266) names nothing: the URL does."""
    bad = [
        'filename="evil.txt"',                                  # no disposition type
        'attachment; filename="evil.txt"; filename="b.txt"',    # two filename
        "attachment; filename*=UTF-8''evil.txt; filename*=UTF-8''b.txt",  # two filename*
        "attachment; filename=evil[1].txt",                     # not a token
        'attachment; filename="evil.txt',                       # unbalanced quote
        'attachment; filename="evil.txt".sh',                   # broken quotes
        "attachment; filename*=UTF-8''evil%zz.txt",             # bad percent escape
        "attachment; filename*=UTF-8''evil%ff.txt",             # invalid UTF-8
        "attachment; filename==?UTF-8?Q?evil.txt?=",            # RFC 2047 encoded word
        'attachment; inline; filename="evil.txt"',              # two disposition types
        "attachment; filename",                                 # no =
        "attachment; filename=",                                # no value
    ]
    good = [("attachment; filename=\"plain.txt\"; filename*=UTF-8''%e2%82%ac-rates.txt", "\u20ac-rates.txt")]
    data = content("cd", 1000)

    def disposition(value):
        def route(h, send_body):
            send_head(h, 200, [("Content-Type", "application/octet-stream"), ("Content-Length", len(data)),
                               ("Content-Disposition", value)])
            if send_body:
                h.wfile.write(data)
        return route

    cases = [(v, "fallback.bin") for v in bad] + good
    taken, notes = [], []
    with Server() as srv:
        for i, (value, want) in enumerate(cases):
            srv.routes[f"/cd/{i}/fallback.bin"] = disposition(value.encode("utf-8").decode("latin-1"))
            d = os.path.join(root, str(i))
            os.mkdir(d)
            r = run_haul(haul, "get", "-q", "-x", "1", "-d", d, srv.url(f"/cd/{i}/fallback.bin"))
            names = sorted(os.listdir(d))
            if names != [want]:
                taken.append(f"{value!r} -> {names} ({r})")
            notes.append(names[0] if names else "-")
    if taken:
        return True, f"{len(taken)} of {len(cases)} named wrongly, e.g. " + "; ".join(taken[:3])
    return False, f"all {len(cases)} headers: {len(bad)} ignored (fallback.bin), filename* preferred ({notes[-1]})"


def check7(haul, root):
    """After kill -9, a rerun re-fetches at most max(256 KiB, 0.25 s of transfer) (plus the one
    chunk being written), on one connection and on four, also in the first second."""
    total, rate = 16 * MiB, 4_000_000
    data = content("waste.bin", total)
    sent = []  # [start, bytes sent] per GET

    def correct_blocks(part):
        """Byte intervals of the partial that hold the file's bytes (4 KiB blocks)."""
        got = read(part) if os.path.isfile(part) else b""
        out, b = [], 4096
        for i in range(0, min(len(got), total), b):
            j = min(i + b, len(got), total)
            if got[i:j] == data[i:j]:
                if out and out[-1][1] == i:
                    out[-1][1] = j
                else:
                    out.append([i, j])
        return out

    def overlap(a, b):
        return sum(max(0, min(x1, y1) - max(x0, y0)) for x0, x1 in a for y0, y1 in b)

    worst, notes = [], []
    for connections in (1, 4):
        bound = max(256 * 1024, rate // 4) + 512 * 1024  # plus the one chunk being written
        figures = []
        for delay in (0.7, 1.6):
            d = os.path.join(root, f"x{connections}-{delay}")
            os.mkdir(d)
            with Server({"/waste.bin": throttled(data, '"w1"', rate // connections, sent)}) as srv:
                args = ["get", "-q", "-x", str(connections), "-d", d, srv.url("/waste.bin")]
                env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
                p = subprocess.Popen([haul, *args], env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                threading.Event().wait(delay)
                p.kill()
                p.wait()
                have = correct_blocks(os.path.join(d, "waste.bin.part"))
                sent.clear()
                r = run_haul(haul, *args)
                refetched = [(s, s + n) for s, n in sent]
            waste = overlap(have, refetched)
            ok = r.rc == 0 and os.path.isfile(os.path.join(d, "waste.bin")) and read(os.path.join(d, "waste.bin")) == data
            figures.append(f"{waste / MiB:.2f} MiB ({waste / rate:.2f} s) of {sum(b - a for a, b in have) / MiB:.2f}"
                           + ("" if ok else f", rerun {r}"))
            if waste > bound or not ok:
                worst.append(f"-x {connections}, kill at {delay} s: re-fetched {waste} bytes it had (bound {bound})")
        notes.append(f"-x {connections}: " + ", ".join(figures))
    return bool(worst), "; ".join(worst or notes)


CHECKS = [(1, check1), (2, check2), (3, check3), (4, check4), (5, check5), (6, check6), (7, check7),
          (8, check8), (9, check9)]


def main():
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} /path/to/haul", file=sys.stderr)
        return 2
    haul = os.path.abspath(sys.argv[1])
    for n, check in CHECKS:
        root = tempfile.mkdtemp(prefix=f"haul-f{n}-")
        try:
            vulnerable, reason = check(haul, root)
            print(f"finding {n}: {'VULNERABLE' if vulnerable else 'SAFE'} ({reason})", flush=True)
        except Exception as e:
            print(f"finding {n}: ERROR ({type(e).__name__}: {e})", flush=True)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
