import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A local HTTPS server: Python's `ssl` with a self-signed certificate made by `openssl` for
/// 127.0.0.1. It is killed after 120 s (`timeout -s KILL`) if the test does not stop it first.
public final class SelfSignedHTTPSServer: Sendable {
    private let dir: TemporaryDirectory
    private let process: ChildProcess
    /// The port it listens on.
    public let port: Int
    /// The certificate (PEM), to trust it explicitly.
    public var certificate: String { dir.file("cert.pem") }
    /// Its public key's pin as curl's `--pinnedpubkey` takes it: `sha256//` and the base64 of
    /// the SHA-256 of the key's SubjectPublicKeyInfo (DER), made by openssl.
    public let publicKeyPin: String

    /// Whether openssl, timeout and python3 are installed.
    public static var available: Bool {
        ["/usr/bin/openssl", "/usr/bin/timeout"].allSatisfy { FileManager.default.isExecutableFile(atPath: $0) }
            && ChildProcess.which("python3") != nil
    }

    /// Starts serving `files` (name → bytes) over HTTPS. Waits by polling (making the key
    /// takes up to a second), so no cooperative thread is blocked meanwhile.
    ///
    /// - Parameter offersHTTP2: offer `h2` before `http/1.1` by ALPN. The server speaks only
    ///   HTTP/1.1: a connection for which `h2` is chosen is closed at once. Each connection's
    ///   choice is in ``alpnChoices``.
    /// - Parameter resettingFirst: how many connections to reset (an RST) once their handshake
    ///   has begun (the client's first message has come).
    /// - Parameter keepsAlive: answer in HTTP/1.1 and keep connections open for the next
    ///   request (otherwise HTTP/1.0, a connection per request). A name with `/` in `files` is
    ///   in a subdirectory, and asking for the directory without its last `/` is a 301 to it.
    public init(
        serving files: [String: [UInt8]], offersHTTP2: Bool = false, resettingFirst: Int = 0, keepsAlive: Bool = false
    ) async throws {
        let dir = try TemporaryDirectory("haul-tls")
        self.dir = dir
        do { publicKeyPin = try await Self.makeCertificate(in: dir) } catch {
            dir.remove()
            throw error
        }
        let root = dir.file("www")
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        for (name, bytes) in files {
            let path = root + "/" + name
            try FileManager.default.createDirectory(
                atPath: String(path[..<path.lastIndex(of: "/")!]), withIntermediateDirectories: true)
            _ = FileManager.default.createFile(atPath: path, contents: Data(bytes))
        }
        let process = try ChildProcess(
            "/usr/bin/timeout",
            [
                "-s", "KILL", "120", ChildProcess.which("python3")!, "-c", Self.script, dir.file("cert.pem"),
                dir.file("key.pem"),
                root, offersHTTP2 ? "h2" : "-", String(resettingFirst), keepsAlive ? "1.1" : "1.0",
            ])
        self.process = process
        // Its first line is the port.
        _ = await eventually(timeout: 20) { process.stdout.contains(UInt8(ascii: "\n")) || !process.isRunning }
        let line = String(decoding: process.stdout, as: UTF8.self).split(separator: "\n").first ?? ""
        guard let port = Int(line.trimmingCharacters(in: .whitespaces)) else {
            process.killGroup()
            dir.remove()
            throw POSIXError(.EIO)
        }
        self.port = port
    }

    /// A self-signed certificate for 127.0.0.1 and its key in `dir` (`cert.pem`, `key.pem`);
    /// returns the key's pin, `sha256//` and the base64 of its SHA-256.
    private static func makeCertificate(in dir: TemporaryDirectory) async throws -> String {
        func openssl(_ arguments: [String]) async throws {
            let run = try ChildProcess("/usr/bin/openssl", arguments, mergingStderr: true)
            guard await run.finish(timeout: 30) == 0 else { throw POSIXError(.EIO) }
        }
        try await openssl([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", dir.file("key.pem"), "-out", dir.file("cert.pem"),
        ])
        try await openssl([
            "pkey", "-in", dir.file("key.pem"), "-pubout", "-outform", "DER", "-out", dir.file("pub.der"),
        ])
        try await openssl(["dgst", "-sha256", "-binary", "-out", dir.file("pub.sha256"), dir.file("pub.der")])
        guard let digest = FileManager.default.contents(atPath: dir.file("pub.sha256")), digest.count == 32 else {
            throw POSIXError(.EIO)
        }
        return "sha256//" + digest.base64EncodedString()
    }

    /// The server: argv is the certificate, the key, the directory served, `h2` or `-`, the
    /// number of connections to reset, and the HTTP version to answer in (`1.1`: keep-alive). It prints its port, then one line per connection:
    /// "reset" (closed with an RST in the handshake), "handshake-failed", or "alpn PROTOCOL"
    /// ("-" for none).
    private static let script = """
        import http.server, ssl, sys, os, socket, struct
        os.chdir(sys.argv[3])
        resets = int(sys.argv[5])
        class Quiet(http.server.SimpleHTTPRequestHandler):
            protocol_version = "HTTP/" + sys.argv[6]
            def log_message(self, *a): pass
        class Server(http.server.ThreadingHTTPServer):
            def get_request(self):
                global resets
                while True:
                    sock, address = self.socket.accept()
                    if resets > 0:
                        resets -= 1
                        # Once the ClientHello is here: the client is in its handshake, not
                        # still connecting (a reset then reads as a refused connection).
                        sock.recv(1)
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                        sock.close()
                        print("reset", flush=True)
                        continue
                    try:
                        return ctx.wrap_socket(sock, server_side=True), address
                    except OSError:
                        print("handshake-failed", flush=True)
                        raise
            def process_request(self, request, address):
                chosen = request.selected_alpn_protocol()
                print("alpn", chosen or "-", flush=True)
                if chosen == "h2":
                    self.shutdown_request(request)
                    return
                super().process_request(request, address)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(sys.argv[1], sys.argv[2])
        if sys.argv[4] == "h2":
            ctx.set_alpn_protocols(["h2", "http/1.1"])
        httpd = Server(("127.0.0.1", 0), Quiet)
        print(httpd.server_address[1], flush=True)
        httpd.serve_forever()
        """

    /// The protocol ALPN chose for each connection that got through the handshake, in order
    /// ("-" for none). Read from the server's output, which may lag a little behind a client
    /// that has just ended: wait for the count expected.
    public var alpnChoices: [String] {
        events.compactMap { $0.hasPrefix("alpn ") ? String($0.dropFirst(5)) : nil }
    }

    /// Every connection accepted so far, in order: `reset`, `handshake-failed` or `alpn P`.
    public var events: [String] {
        String(decoding: process.stdout, as: UTF8.self).split(separator: "\n").dropFirst().map(String.init)
    }

    /// `https://127.0.0.1:PORT/path`
    public func url(_ path: String) -> URL { URL(string: "https://127.0.0.1:\(port)\(path)")! }

    /// Kills the server (`timeout` and python, its process group) and removes its files.
    public func stop() {
        process.killGroup()
        dir.remove()
    }
}
