import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A proxy on 127.0.0.1 that the tests start: an HTTP proxy (absolute-form requests forwarded,
/// one per connection, request bodies of a known length only; `CONNECT` tunnelled, for https)
/// or a SOCKS5 proxy (its CONNECT, with the host as a name or an address), optionally asking for
/// a user and password (HTTP: 407 and `Proxy-Authorization: Basic`; SOCKS5: RFC 1929). The
/// SOCKS5 proxy takes any name under `haul.test` for 127.0.0.1: a name only the proxy can
/// resolve. Python's, killed after 120 s (`timeout -s KILL`) if the test does not stop it first.
public final class TestProxy: Sendable {
    public enum Kind: String, Sendable { case http, socks5 }

    /// What the proxy was asked, one per request (HTTP) or connection (SOCKS5).
    public struct Request: Sendable, Equatable {
        /// `GET`, `CONNECT`, …, or `SOCKS5`.
        public var method: String
        /// The absolute URL (HTTP), or `host:port` (CONNECT, SOCKS5).
        public var target: String
        /// The `Proxy-Authorization` value (HTTP), or `user:password` (SOCKS5); empty for none.
        public var auth: String

        public init(method: String, target: String, auth: String) {
            (self.method, self.target, self.auth) = (method, target, auth)
        }
    }

    private let process: ChildProcess
    /// The port it listens on.
    public let port: Int
    public let kind: Kind

    /// Whether timeout and python3 are installed.
    public static var available: Bool {
        FileManager.default.isExecutableFile(atPath: "/usr/bin/timeout") && ChildProcess.which("python3") != nil
    }

    /// Starts a proxy of `kind`; with `credential` ("user:password") it admits only requests
    /// that carry it.
    public init(_ kind: Kind, credential: String? = nil) async throws {
        self.kind = kind
        let process = try ChildProcess(
            "/usr/bin/timeout",
            ["-s", "KILL", "120", ChildProcess.which("python3")!, "-c", Self.script, kind.rawValue, credential ?? "-"])
        self.process = process
        _ = await eventually(timeout: 20) { process.stdout.contains(UInt8(ascii: "\n")) || !process.isRunning }
        let line = String(decoding: process.stdout, as: UTF8.self).split(separator: "\n").first ?? ""
        guard let port = Int(line.trimmingCharacters(in: .whitespaces)) else {
            process.killGroup()
            throw POSIXError(.EIO)
        }
        self.port = port
    }

    /// `SCHEME://[credential@]127.0.0.1:PORT`, as `--proxy` takes it.
    public func url(credential: String? = nil) -> String {
        let scheme = kind == .http ? "http" : "socks5h"
        return "\(scheme)://" + (credential.map { $0 + "@" } ?? "") + "127.0.0.1:\(port)"
    }

    /// What it was asked so far, in order. The proxy's output may lag a little behind a client
    /// that has just ended: wait for the count expected.
    public var requests: [Request] {
        String(decoding: process.stdout, as: UTF8.self).split(separator: "\n").dropFirst().compactMap { line in
            guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: String],
                let method = object["method"], let target = object["target"], let auth = object["auth"]
            else { return nil }
            return Request(method: method, target: target, auth: auth)
        }
    }

    /// Kills the proxy (`timeout` and python, its process group).
    public func stop() { process.killGroup() }

    private static let script = #"""
        import socketserver, socket, sys, threading, json, base64, select

        MODE = sys.argv[1]          # "http" or "socks5"
        AUTH = sys.argv[2]          # "user:pass" or "-"
        lock = threading.Lock()

        def log(**kw):
            with lock:
                print(json.dumps(kw), flush=True)

        def pipe(a, b):
            socks = [a, b]
            try:
                while True:
                    r, _, _ = select.select(socks, [], [], 30)
                    if not r:
                        return
                    for s in r:
                        data = s.recv(65536)
                        if not data:
                            return
                        (b if s is a else a).sendall(data)
            except OSError:
                return

        def read_head(sock):
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = sock.recv(65536)
                if not chunk:
                    return None, b""
                data += chunk
                if len(data) > 65536:
                    return None, b""
            head, rest = data.split(b"\r\n\r\n", 1)
            return head, rest

        class HTTPProxy(socketserver.BaseRequestHandler):
            def handle(self):
                c = self.request
                head, rest = read_head(c)
                if head is None:
                    return
                lines = head.split(b"\r\n")
                method, target, version = lines[0].decode("latin-1").split(" ", 2)
                headers = [l for l in lines[1:]]
                auth = ""
                for l in headers:
                    name, _, value = l.partition(b":")
                    if name.strip().lower() == b"proxy-authorization":
                        auth = value.strip().decode("latin-1")
                log(method=method, target=target, auth=auth)
                if AUTH != "-" and auth != "Basic " + base64.b64encode(AUTH.encode()).decode():
                    c.sendall(b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"proxy\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    return
                if method == "CONNECT":
                    host, _, port = target.rpartition(":")
                    try:
                        u = socket.create_connection((host.strip("[]"), int(port)), timeout=10)
                    except OSError:
                        c.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                        return
                    c.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    if rest:
                        u.sendall(rest)
                    pipe(c, u)
                    u.close()
                    return
                # Absolute form: http://host:port/path
                assert target.startswith("http://")
                hostport, _, path = target[len("http://"):].partition("/")
                host, _, port = hostport.rpartition(":") if ":" in hostport else (hostport, "", "80")
                u = socket.create_connection((host, int(port)), timeout=10)
                kept = [l for l in headers if not l.lower().startswith(b"proxy-") and not l.lower().startswith(b"connection:")]
                u.sendall(("%s /%s %s\r\n" % (method, path, version)).encode("latin-1") + b"\r\n".join(kept + [b"Connection: close"]) + b"\r\n\r\n" + rest)
                # The rest of a body of known length, before the answer is read (the server waits for it).
                length = 0
                for l in headers:
                    name, _, value = l.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                left = length - len(rest)
                while left > 0:
                    chunk = c.recv(min(left, 65536))
                    if not chunk:
                        return
                    u.sendall(chunk)
                    left -= len(chunk)
                # The answer, with "Connection: close" added: one request per client connection.
                rhead, rrest = read_head(u)
                if rhead is None:
                    return
                rlines = rhead.split(b"\r\n")
                rlines = [rlines[0]] + [l for l in rlines[1:] if not l.lower().startswith(b"connection:")] + [b"Connection: close"]
                c.sendall(b"\r\n".join(rlines) + b"\r\n\r\n" + rrest)
                pipe(c, u)
                u.close()

        class SOCKS5Proxy(socketserver.BaseRequestHandler):
            def recvall(self, n):
                data = b""
                while len(data) < n:
                    chunk = self.request.recv(n - len(data))
                    if not chunk:
                        raise OSError("closed")
                    data += chunk
                return data
            def handle(self):
                c = self.request
                try:
                    ver, n = self.recvall(2)
                    methods = self.recvall(n)
                    auth = ""
                    if AUTH != "-":
                        if 2 not in methods:
                            c.sendall(b"\x05\xff"); return
                        c.sendall(b"\x05\x02")
                        _, ulen = self.recvall(2); user = self.recvall(ulen)
                        plen = self.recvall(1)[0]; pw = self.recvall(plen)
                        auth = (user + b":" + pw).decode("latin-1")
                        ok = auth == AUTH
                        c.sendall(b"\x01\x00" if ok else b"\x01\x01")
                        if not ok:
                            log(method="SOCKS5", target="", auth=auth); return
                    else:
                        c.sendall(b"\x05\x00")
                    ver, cmd, _, atyp = self.recvall(4)
                    if atyp == 1:
                        host = socket.inet_ntoa(self.recvall(4))
                    elif atyp == 3:
                        host = self.recvall(self.recvall(1)[0]).decode("latin-1")
                    else:
                        host = socket.inet_ntop(socket.AF_INET6, self.recvall(16))
                    port = int.from_bytes(self.recvall(2), "big")
                    log(method="SOCKS5", target="%s:%d" % (host, port), auth=auth)
                    # Names under haul.test are known to the proxy alone (the machine cannot resolve
                    # them): they are this machine.
                    u = socket.create_connection(("127.0.0.1" if host.endswith(".haul.test") else host, port), timeout=10)
                    c.sendall(b"\x05\x00\x00\x01" + socket.inet_aton("127.0.0.1") + (0).to_bytes(2, "big"))
                    pipe(c, u)
                    u.close()
                except OSError:
                    return

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        server = Server(("127.0.0.1", 0), HTTPProxy if MODE == "http" else SOCKS5Proxy)
        print(server.server_address[1], flush=True)
        server.serve_forever()
        """#
}
