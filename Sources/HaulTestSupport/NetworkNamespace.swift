import Foundation
import HaulCore

#if canImport(Glibc)
    import Glibc
#endif

/// A Linux network namespace for tests, made with `ip netns add` (iproute2) and always
/// removed: by ``remove()`` (call it in a `defer`), and, for namespaces left by a test process
/// that was killed, by the next ``create(_:)`` (names carry the creating process's pid).
///
/// Nothing here touches the host's own interfaces or routes: links are created inside
/// namespaces (a veth pair is born in one namespace with its peer in another), and commands run
/// with `ip -n NAME`. Every command is bounded (killed after 10 s).
public final class NetworkNamespace: Sendable {
    /// The name under /var/run/netns.
    public let name: String
    private static let counter = Locked(0)
    private static let prefix = "haul-t"

    private init(name: String) { self.name = name }

    /// Why namespaces cannot be used here (not Linux, not root, no `ip`), or nil when they can.
    public static func unavailableReason() async -> String? {
        #if os(Linux)
            guard geteuid() == 0 else { return "network namespaces need root (uid \(geteuid()))" }
            guard let ip = ipPath else { return "iproute2's ip is not installed" }
            let probe = "\(prefix)probe-\(getpid())"
            let add = await run(ip, ["netns", "add", probe])
            guard add.status == 0 else { return "ip netns add failed: \(add.output)" }
            _ = await run(ip, ["netns", "del", probe])
            return nil
        #else
            return "network namespaces are Linux-only"
        #endif
    }

    /// Creates an empty namespace (only a loopback interface, down) named after `tag`.
    public static func create(_ tag: String) async throws -> NetworkNamespace {
        await removeStale()
        let n = counter.withLock {
            $0 += 1
            return $0
        }
        let ns = NetworkNamespace(name: "\(prefix)\(getpid())-\(n)-\(tag)")
        try await ns.command(["netns", "add", ns.name], namespaced: false)
        return ns
    }

    /// Runs `body` with a fresh namespace and always deletes it afterwards.
    public static func with<T>(_ tag: String, _ body: (NetworkNamespace) async throws -> T) async throws -> T {
        let ns = try await create(tag)
        do {
            let result = try await body(ns)
            await ns.remove()
            return result
        } catch {
            await ns.remove()
            throw error
        }
    }

    /// Runs `ip -n NAME args…`; throws with ip's message when it fails.
    public func ip(_ args: String...) async throws { try await command(args, namespaced: true) }

    /// The command line that runs `argv` inside this namespace (`ip netns exec`, which also
    /// mounts a /sys that shows this namespace's interfaces).
    public func exec(_ argv: [String]) -> (URL, [String]) {
        (URL(fileURLWithPath: Self.ipPath ?? "/usr/sbin/ip"), ["netns", "exec", name] + argv)
    }

    /// Deletes the namespace (its interfaces and routes go with it).
    public func remove() async {
        _ = await Self.run(Self.ipPath ?? "ip", ["netns", "del", name])
    }

    /// Calls `body` on a thread that has joined the namespace `name`, so sockets it creates
    /// belong there (``TestServer/inside(networkNamespace:_:)``).
    public static func inside<T: Sendable>(_ name: String, _ body: @escaping @Sendable () throws -> T) throws -> T {
        try TestServer.inside(networkNamespace: name, body)
    }

    /// A failed `ip` command.
    public struct Failure: Error, CustomStringConvertible {
        /// The command and what it printed.
        public var description: String
    }

    private func command(_ args: [String], namespaced: Bool) async throws {
        guard let ip = Self.ipPath else { throw Failure(description: "ip is not installed") }
        let argv = namespaced ? ["-n", name] + args : args
        let r = await Self.run(ip, argv)
        guard r.status == 0 else { throw Failure(description: "ip \(argv.joined(separator: " ")): \(r.output)") }
    }

    /// Whether iproute2's `ip` is installed.
    public static var ipInstalled: Bool { ipPath != nil }

    private static let ipPath: String? = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"].first {
        FileManager.default.isExecutableFile(atPath: $0)
    }

    /// Deletes namespaces of this prefix whose creating process is gone.
    private static func removeStale() async {
        guard let ip = ipPath else { return }
        let list = await run(ip, ["netns", "list"])
        for line in list.output.split(separator: "\n") {
            let name = String(line.split(separator: " ").first ?? "")
            guard name.hasPrefix(prefix), let pid = Int32(name.dropFirst(prefix.count).prefix { $0.isNumber }),
                kill(pid, 0) != 0, errno == ESRCH
            else { continue }
            _ = await run(ip, ["netns", "del", name])
        }
    }

    /// Runs a program to its end without blocking a thread of the cooperative pool; killed
    /// after `timeout` seconds.
    public static func run(
        _ path: String, _ args: [String], timeout: Double = 10
    ) async -> (
        status: Int32, output: String
    ) {
        let p: ChildProcess
        do { p = try ChildProcess(path, args, mergingStderr: true) } catch { return (-1, "\(error)") }
        let status = await p.finish(timeout: timeout) ?? -1
        let text = String(decoding: p.stdout, as: UTF8.self)
        return (status, text.trimmingCharacters(in: .whitespacesAndNewlines))
    }
}

/// Two namespaces joined by a veth pair: `client` (10.77.0.2/24 on `veth0`) and `server`
/// (10.77.0.1/24 on `veth1`), loopback up in both, no default route yet.
public struct LinkedNamespaces: Sendable {
    /// Where the program under test runs.
    public let client: NetworkNamespace
    /// Where the test server listens (``serverAddress``).
    public let server: NetworkNamespace
    /// The server side's address.
    public let serverAddress = "10.77.0.1"
    /// The client side's address.
    public let clientAddress = "10.77.0.2"

    /// Creates both and the link (cleaning up what it made if a step fails).
    public static func create() async throws -> LinkedNamespaces {
        let client = try await NetworkNamespace.create("client")
        do {
            let server = try await NetworkNamespace.create("server")
            let pair = LinkedNamespaces(client: client, server: server)
            do {
                try await client.ip("link", "set", "lo", "up")
                try await server.ip("link", "set", "lo", "up")
                try await client.ip(
                    "link", "add", "veth0", "type", "veth", "peer", "name", "veth1", "netns", server.name)
                try await client.ip("addr", "add", pair.clientAddress + "/24", "dev", "veth0")
                try await server.ip("addr", "add", pair.serverAddress + "/24", "dev", "veth1")
                try await client.ip("link", "set", "veth0", "up")
                try await server.ip("link", "set", "veth1", "up")
            } catch {
                await pair.remove()
                throw error
            }
            return pair
        } catch {
            await client.remove()
            throw error
        }
    }

    /// Runs `body` with a fresh pair and always deletes it afterwards.
    public static func with<T>(_ body: (LinkedNamespaces) async throws -> T) async throws -> T {
        let net = try await create()
        do {
            let result = try await body(net)
            await net.remove()
            return result
        } catch {
            await net.remove()
            throw error
        }
    }

    /// Gives the client a default route through the server side.
    public func addDefaultRoute() async throws {
        try await client.ip("route", "add", "default", "via", serverAddress)
    }

    /// Takes the client's default route away.
    public func removeDefaultRoute() async throws { try await client.ip("route", "del", "default") }

    /// Deletes both namespaces.
    public func remove() async {
        await client.remove()
        await server.remove()
    }
}
