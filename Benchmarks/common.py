"""Shared pieces of the benchmarks: a private nginx on 127.0.0.1, timing, checksums."""
import hashlib, os, random, shutil, socket, subprocess, sys, tempfile, time


def ensure(tool, package):
    """The path of `tool`, installing Debian's `package` with apt-get when it is missing."""
    for candidate in (shutil.which(tool), f"/usr/sbin/{tool}", f"/usr/bin/{tool}"):
        if candidate and os.path.exists(candidate):
            return candidate
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", package], check=True, env=env)
    return shutil.which(tool) or f"/usr/sbin/{tool}"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def shuffled(clients):
    """The (name, value) pairs of `clients` in a random order: each round runs its clients so. A
    fixed order biased a pair by up to 20 ms on this machine (Benchmarks/RESULTS.md, thirty-first
    session)."""
    return random.sample(list(clients.items()), len(clients))


def small_files(server, work, count, kib):
    """`count` files of `kib` KiB on `server` (each a rotation of one random block, so no two are
    the same), a URL list for them in `work` and a curl config that saves each under its name;
    returns (names, their SHA-256s, the list's path, the config's path). many_small.py and
    threads.py fetch the same set."""
    chunk = os.urandom(kib * 1024)
    names = [f"f{i:04d}.bin" for i in range(count)]
    sums = {}
    for i, name in enumerate(names):
        with open(os.path.join(server.root, name), "wb") as f:
            f.write(chunk[i % 97:] + chunk[:i % 97])
        sums[name] = sha256(os.path.join(server.root, name))
    urls = os.path.join(work, "urls.txt")
    with open(urls, "w") as f:
        f.write("".join(server.url(n) + "\n" for n in names))
    config = os.path.join(work, "curl.cfg")
    with open(config, "w") as f:
        f.write("".join(f'url = "{server.url(n)}"\noutput = "{n}"\n' for n in names))
    return names, sums, urls, config


def measure(cmd, cwd=None):
    """Runs cmd; returns (wall seconds, user+sys CPU seconds, peak RSS MiB).

    Under GNU time, whose own fork gives cmd a fresh process: wait4's ru_maxrss of a child that
    Python started counts Python's own resident size (the vfork'd child shares Python's memory
    until exec, and Linux keeps that high-water mark across exec), which put curl --version at
    18 MiB instead of 12. Wall time is taken here and includes time's start (about 1.5 ms, the
    same for every client); start-up rows are timed without it (startup.py)."""
    gnu_time = ensure("time", "time")
    with tempfile.NamedTemporaryFile("r", prefix="haul-bench-time-") as report:
        start = time.monotonic()
        p = subprocess.Popen([gnu_time, "-q", "-o", report.name, "-f", "%x %U %S %M"] + cmd,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd)
        p.wait()
        wall = time.monotonic() - start
        fields = report.read().split()
    if p.returncode != 0 or len(fields) < 4 or fields[-4] != "0":
        sys.exit(f"{cmd[0]} failed with status {p.returncode} ({' '.join(fields)})")
    status, user, system, rss_kib = fields[-4:]
    return wall, float(user) + float(system), int(rss_kib) / 1024


def timed(cmd, cwd=None):
    """Runs cmd directly; returns its wall seconds (for start-up rows, where time's 1.5 ms shows)."""
    start = time.monotonic()
    status = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd).returncode
    if status != 0:
        sys.exit(f"{cmd[0]} failed with status {status}")
    return time.monotonic() - start


class Nginx:
    """nginx serving `files` (name -> size in MiB, random content) from a private directory,
    optionally with a per-connection `limit_rate`."""

    def __init__(self, files, limit_rate=None):
        self.binary = ensure("nginx", "nginx-light")
        self.work = tempfile.mkdtemp(prefix="haul-bench-")
        os.chmod(self.work, 0o755)  # nginx workers run as another user
        self.root = os.path.join(self.work, "www")
        os.makedirs(self.root)
        self.sums = {}
        chunk = os.urandom(1 << 20)
        for name, mib in files.items():
            path = os.path.join(self.root, name)
            with open(path, "wb") as f:
                for i in range(mib):
                    f.write(chunk[i % 7:] + chunk[:i % 7])
            self.sums[name] = sha256(path)
        self.port = free_port()
        limit = f"limit_rate {limit_rate};" if limit_rate else ""
        conf = os.path.join(self.work, "nginx.conf")
        with open(conf, "w") as f:
            f.write(f"""daemon off; worker_processes 2; pid {self.work}/nginx.pid; error_log {self.work}/error.log;
events {{ worker_connections 4096; }}
http {{ access_log off; sendfile on; tcp_nopush on; keepalive_requests 100000;
  server {{ listen 127.0.0.1:{self.port}; root {self.root}; {limit} }} }}
""")
        self.process = subprocess.Popen([self.binary, "-c", conf, "-p", self.work])
        time.sleep(0.5)

    def url(self, name):
        return f"http://127.0.0.1:{self.port}/{name}"

    def stop(self):
        self.process.terminate()
        self.process.wait()
        shutil.rmtree(self.work, ignore_errors=True)
