import Haul
import HaulCore

#if canImport(Glibc)
    import Glibc
#endif

/// `haul serve`: the store, the token, the HTTP doors, the API and one `DownloadManager`,
/// wired together. One daemon per state directory (a lock says so); the queue it finds there
/// is continued from the partial files.
package final class ServeDaemon: Sendable {
    package struct Configuration: Sendable {
        /// Where the store, the token and the address file live (0700).
        package var state: String
        /// The download root.
        package var root: String
        /// The HTTP port (0: one the system picks, for tests).
        package var port = 6800
        /// The addresses listened on: loopback unless told otherwise.
        package var addresses = ["127.0.0.1", "::1"]
        /// Host names answered to besides `localhost`, `127.0.0.1` and `[::1]`.
        package var names: [String] = []
        /// The home directory the root may not be (nil: none, for tests).
        package var home: String? = XDGDirectory.home()
        package var manager = DownloadManager.Configuration()
        /// `-j`: downloads at once, over the page's stored setting; nil: the setting, else 3.
        package var maxConcurrentDownloads: Int?
        /// `--max-overall-rate`: the shared speed limit (0: none), over the page's stored
        /// setting; nil: the setting, else none.
        package var maxOverallBytesPerSecond: Int64?
        /// The most downloads an event stream's snapshot carries (smaller in tests).
        package var snapshotLimit = EventStreams.snapshotLimit

        package init(state: String, root: String) {
            self.state = state
            self.root = root
        }
    }

    /// The port listened on.
    package let port: Int
    package let token: ServeToken
    let api: ServeAPI
    let server: HTTPServer
    let runner: ManagerRunner
    /// The state directory's lock, held while the daemon runs.
    private let lock: Int32
    private let addressFile: String

    /// The address file's name in the state directory: `http://127.0.0.1:PORT`, for the CLI.
    package static let addressName = "address"

    package init(_ configuration: Configuration) throws(ServeError) {
        let state = Sys.lexicallyNormalized(configuration.state)
        do throws(HaulError) { token = try ServeToken.loadOrCreate(at: state + "/token") } catch {
            throw ServeError(.internalError, error.message)
        }
        lock = try Self.lock(state)
        // A stopped daemon's address (after kill -9) names a port anyone may hold by now.
        addressFile = state + "/" + Self.addressName
        try? Sys.unlink(addressFile)
        var sockets: [Int32] = []
        do throws(ServeError) {
            (sockets, port) = try Self.listen(configuration.addresses, port: configuration.port)
            let root = try DownloadRoot(configuration.root, home: configuration.home, state: state)
            let store = try ServeStore(path: state + "/serve.sqlite")
            var manager = configuration.manager
            if let n = configuration.maxConcurrentDownloads {
                try store.setSetting(ServeAPI.concurrencyKey, String(n))
            }
            manager.maxConcurrentDownloads = try store.setting(ServeAPI.concurrencyKey).flatMap { Int($0) } ?? 3
            if let rate = configuration.maxOverallBytesPerSecond {
                try store.setSetting(ServeAPI.overallRateKey, String(rate))
            }
            let rate = try store.setting(ServeAPI.overallRateKey).flatMap { Int64($0) } ?? 0
            manager.session.maxOverallBytesPerSecond = rate > 0 ? rate : nil
            do { runner = try ManagerRunner(configuration: manager) } catch {
                throw ServeError(.internalError, error.message)
            }
            let api = ServeAPI(
                store: store, token: token, hosts: try HostPolicy(port: port, extraNames: configuration.names),
                root: root, runner: runner)
            api.snapshotLimit = configuration.snapshotLimit
            self.api = api
            do throws(Errno) {
                try Sys.writeFileAtomically(addressFile, Array("http://127.0.0.1:\(port)\n".utf8))
            } catch {
                throw ServeError(.internalError, "cannot write \(addressFile): \(error)")
            }
            // The server owns the sockets from here, closing them if it cannot start.
            let taken = sockets
            sockets = []
            server = try HTTPServer(sockets: taken) { request, exchange in api.handle(request, exchange) }
        } catch {
            for fd in sockets { Sys.close(fd) }
            try? Sys.unlink(addressFile)
            Sys.close(lock)
            throw error
        }
        runner.onReport { [server, api] reports in server.onLoop { api.apply(reports) } }
        server.onLoop { [api] in try? api.resumeQueue() }
        server.onTick { [api] in api.tick() }
        runner.onNetwork { [server, api] state in
            server.onLoop { _ = try? api.store.append(event: "network", download: nil, body: ServeAPI.text(state)) }
        }
    }

    /// The page's address, with the token in its fragment (which browsers never send).
    package var pageURL: String { "http://127.0.0.1:\(port)/#token=\(token.text)" }

    /// Stops the transfers (keeping their bytes and their place: the next daemon continues
    /// them), then the doors.
    package func stop() async {
        runner.onReport { _ in }
        runner.onNetwork { _ in }
        await runner.shutdown()
        server.stop()
        try? Sys.unlink(addressFile)
        Sys.close(lock)
    }

    /// The state directory's lock: a second daemon on it is refused (two writers of one queue
    /// would run each download twice).
    private static func lock(_ state: String) throws(ServeError) -> Int32 {
        let path = state + "/serve.lock"
        let fd: Int32
        do { fd = try Sys.open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, mode: 0o600) } catch {
            throw ServeError(.internalError, "cannot open \(path): \(error)")
        }
        guard (try? Sys.lockByteOrThrow(fd, at: 0)) == true else {
            Sys.close(fd)
            throw ServeError(.internalError, "another haul serve is running on \(state)")
        }
        return fd
    }

    /// Listening sockets on `addresses`, all on one port (the first one's, when 0 is asked). An
    /// address this machine does not have (no IPv6) is skipped; the first must be there.
    private static func listen(_ addresses: [String], port: Int) throws(ServeError) -> ([Int32], Int) {
        var sockets: [Int32] = []
        var port = port
        for (index, address) in addresses.enumerated() {
            do throws(Errno) {
                let (fd, got) = try Sys.listenTCP(address: address, port: port)
                sockets.append(fd)
                port = got
            } catch {
                let absent = error == Errno(EADDRNOTAVAIL) || error == Errno(EAFNOSUPPORT)
                if index > 0 && absent { continue }
                for fd in sockets { Sys.close(fd) }
                throw ServeError(.internalError, "cannot listen on \(address) port \(port): \(error)")
            }
        }
        return (sockets, port)
    }
}
