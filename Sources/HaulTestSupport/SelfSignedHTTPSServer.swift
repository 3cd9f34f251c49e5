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

    /// Whether openssl, timeout and python3 are installed.
    public static var available: Bool {
        ["/usr/bin/openssl", "/usr/bin/timeout"].allSatisfy { FileManager.default.isExecutableFile(atPath: $0) }
            && which("python3") != nil
    }

    private static func which(_ tool: String) -> String? {
        (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin").split(separator: ":")
            .map { "\($0)/\(tool)" }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// Starts serving `files` (name → bytes) over HTTPS. Waits by polling (making the key
    /// takes up to a second), so no cooperative thread is blocked meanwhile.
    public init(serving files: [String: [UInt8]]) async throws {
        let dir = try TemporaryDirectory("haul-tls")
        self.dir = dir
        let openssl = try ChildProcess(
            "/usr/bin/openssl",
            [
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", dir.file("key.pem"), "-out", dir.file("cert.pem"),
            ], mergingStderr: true)
        guard await openssl.finish(timeout: 30) == 0 else {
            dir.remove()
            throw POSIXError(.EIO)
        }
        let root = dir.file("www")
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        for (name, bytes) in files {
            _ = FileManager.default.createFile(atPath: root + "/" + name, contents: Data(bytes))
        }
        let script = """
            import http.server, ssl, sys, os
            os.chdir(sys.argv[3])
            class Quiet(http.server.SimpleHTTPRequestHandler):
                def log_message(self, *a): pass
            httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(sys.argv[1], sys.argv[2])
            httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
            print(httpd.server_address[1], flush=True)
            httpd.serve_forever()
            """
        let process = try ChildProcess(
            "/usr/bin/timeout",
            [
                "-s", "KILL", "120", Self.which("python3")!, "-c", script, dir.file("cert.pem"), dir.file("key.pem"),
                root,
            ])
        self.process = process
        // Its first line is the port.
        _ = await eventually(timeout: 20) { process.stdout.contains(UInt8(ascii: "\n")) || !process.isRunning }
        let line = String(decoding: process.stdout, as: UTF8.self)
        guard let port = Int(line.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            process.killGroup()
            dir.remove()
            throw POSIXError(.EIO)
        }
        self.port = port
    }

    /// `https://127.0.0.1:PORT/path`
    public func url(_ path: String) -> URL { URL(string: "https://127.0.0.1:\(port)\(path)")! }

    /// Kills the server (`timeout` and python, its process group) and removes its files.
    public func stop() {
        process.killGroup()
        dir.remove()
    }
}
