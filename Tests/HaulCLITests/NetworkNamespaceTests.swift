import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

#if canImport(Glibc)
    import Glibc
#endif

/// A `haul` process inside a network namespace, with its output readable while it runs.
final class NamespacedHaul: Sendable {
    let process: ChildProcess

    init(_ ns: NetworkNamespace, _ args: [String], in directory: String? = nil) throws {
        let (ip, argv) = ns.exec([CLI.binary.path] + args)
        process = try CLI.start(argv, in: directory, executable: ip)
    }

    var stdoutLines: [String] {
        String(decoding: process.stdout, as: UTF8.self).split(separator: "\n").map(String.init)
    }
    var stderr: String { String(decoding: process.stderr, as: UTF8.self) }

    /// JSON lines whose "event" (for `haul get --json`) or "status" (for `haul net --json`)
    /// field is `value`.
    func lines(_ field: String, _ value: String) -> [String] {
        stdoutLines.filter { $0.contains("\"\(field)\":\"\(value)\"") }
    }

    /// Waits for the exit and the last output (killing it after `timeout` s) and returns the
    /// status (-1 if not even the kill ended it).
    func exitStatus(timeout: Double = 60) async -> Int32 { await process.finish(timeout: timeout) ?? -1 }

    func stop() { process.killGroup() }
}

/// Root can make network namespaces here; elsewhere these tests are skipped (the reason is in
/// the trait's comment, and `NetworkNamespace.unavailableReason()` says it in full).
let namespacesPossible: Bool = {
    #if os(Linux)
        return geteuid() == 0 && NetworkNamespace.ipInstalled
    #else
        return false
    #endif
}()

@Suite(
    "Real networks in namespaces (ip netns, veth; skipped unless root with iproute2)", .serialized,
    .enabled(if: namespacesPossible, "network namespaces need root and iproute2's ip"), .fewAtOnce)
struct NetworkNamespaceTests {
    init() async throws {
        if let reason = await NetworkNamespace.unavailableReason() { Issue.record("namespaces: \(reason)") }
    }

    @Test func aLinkWithoutADefaultRouteIsUnsatisfiedAndTheRouteArrivesAsAnEventWithinASecond() async throws {
        try await LinkedNamespaces.with { net in try await watchRouteChanges(net) }
    }

    func watchRouteChanges(_ net: LinkedNamespaces) async throws {
        let watcher = try NamespacedHaul(net.client, ["net", "--watch", "--json"])
        defer { watcher.stop() }
        #expect(await eventually(timeout: 10) { !watcher.stdoutLines.isEmpty }, "\(watcher.stderr)")
        let first = watcher.stdoutLines.first ?? ""
        #expect(first.contains("\"status\":\"unsatisfied\""), "\(first)")
        #expect(first.contains("\"name\":\"veth0\",\"kind\":\"other\",\"up\":true"), "\(first)")
        try await Task.sleep(nanoseconds: 300_000_000)  // let the link's own events settle
        let before = watcher.lines("status", "satisfied").count
        let added = Date()
        try await net.addDefaultRoute()
        var seen: Date?
        for _ in 0..<500 where seen == nil {  // 5 s at most
            if watcher.lines("status", "satisfied").count > before { seen = Date() }
            try await Task.sleep(nanoseconds: 10_000_000)
        }
        let latency = seen.map { $0.timeIntervalSince(added) }
        #expect(latency != nil && latency! < 1, "the change took \(latency.map { String($0) } ?? "forever")")
        #expect(watcher.lines("status", "satisfied").last?.contains("\"primary\":\"veth0\"") == true)
        let unsatisfied = watcher.lines("status", "unsatisfied").count
        try await net.removeDefaultRoute()
        #expect(await eventually(timeout: 2) { watcher.lines("status", "unsatisfied").count > unsatisfied })
        watcher.stop()
        _ = await watcher.exitStatus()
    }

    @Test func aDownloadWaitsWhenTheRouteGoesAndFinishesExactWhenItReturns() async throws {
        try await LinkedNamespaces.with { net in try await downloadAcrossRouteLoss(net) }
    }

    func downloadAcrossRouteLoss(_ net: LinkedNamespaces) async throws {
        let dir = try TemporaryDirectory()
        let server = try TestServer(host: net.serverAddress, networkNamespace: net.server.name)
        defer { cleanUp(server, dir) }
        try await net.addDefaultRoute()
        let size = 3_000_000
        let url = server.url("/far.bin?size=\(size)&rate=600000").absoluteString
        // One connection, so the request log reads simply (the waiting is the same with -x 4).
        let haul = try NamespacedHaul(net.client, ["get", "-x", "1", "--json", "-o", dir.file("far.bin"), url])
        defer { haul.stop() }
        #expect(
            await eventually(timeout: 15) {
                haul.lines("event", "progress").contains { !$0.contains("\"bytes\":0,") }
                    && server.bytesSent(path: "/far.bin") > 300_000
            }, "\(haul.stderr)")
        try await net.removeDefaultRoute()
        #expect(await eventually(timeout: 5) { !haul.lines("event", "waiting").isEmpty }, "\(haul.stdoutLines)")
        #expect(haul.lines("event", "waiting").first?.contains("no default route") == true)
        try await Task.sleep(nanoseconds: 300_000_000)
        let sent = server.bytesSent(path: "/far.bin")
        let requests = server.requests.count
        try await Task.sleep(nanoseconds: 800_000_000)
        #expect(server.bytesSent(path: "/far.bin") == sent, "nothing flows while waiting")
        #expect(server.requests.count == requests, "no request while waiting")
        #expect(sent < size, "still unfinished when the route went")
        try await net.addDefaultRoute()
        let status = await haul.exitStatus(timeout: 30)
        #expect(status == 0, "\(haul.stderr)")
        #expect(!haul.lines("event", "network").isEmpty, "it said the network is back")
        expectFile(dir.file("far.bin"), equals: TestContent.bytes(count: size))
        let ranges = server.requests(path: "/far.bin").compactMap(\.rangeStart)
        #expect(ranges.count == 1 && ranges[0] > 0, "continued with one Range request: \(ranges)")
    }

    @Test func aQueuedDownloadWaitsForTheNetworkInTheManagerToo() async throws {
        try await LinkedNamespaces.with { net in
            let dir = try TemporaryDirectory()
            let server = try TestServer(host: net.serverAddress, networkNamespace: net.server.name)
            defer { cleanUp(server, dir) }
            try await net.addDefaultRoute()
            let size = 3_000_000
            let urls = (1...2).map { server.url("/q\($0).bin?size=\(size)&rate=500000&seed=\($0)").absoluteString }
            // -j: the DownloadManager's policy (items become .waitingForNetwork), default -x 4.
            let haul = try NamespacedHaul(net.client, ["get", "-j", "2", "--json", "-d", dir.path] + urls)
            defer { haul.stop() }
            #expect(await eventually(timeout: 15) { server.bytesSent(path: "/q1.bin") > 300_000 }, "\(haul.stderr)")
            try await net.removeDefaultRoute()
            #expect(await eventually(timeout: 5) { haul.lines("event", "waiting").count == 2 }, "\(haul.stdoutLines)")
            #expect(
                haul.lines("event", "waiting").allSatisfy { $0.contains("no default route") }, "\(haul.stdoutLines)")
            try await Task.sleep(nanoseconds: 300_000_000)
            let sent = server.bytesSent(path: "/q1.bin") + server.bytesSent(path: "/q2.bin")
            try await Task.sleep(nanoseconds: 800_000_000)
            #expect(server.bytesSent(path: "/q1.bin") + server.bytesSent(path: "/q2.bin") == sent, "nothing flows")
            try await net.addDefaultRoute()
            #expect(await haul.exitStatus(timeout: 30) == 0, "\(haul.stderr)")
            #expect(haul.lines("event", "network").count == 2)
            for i in 1...2 { expectFile(dir.file("q\(i).bin"), equals: TestContent.bytes(seed: i, count: size)) }
        }
    }

    @Test func loopbackOnlyIsUnsatisfiedAndNoWaitFailsAtOnce() async throws {
        try await NetworkNamespace.with("offline") { ns in try await offline(ns) }
    }

    func offline(_ ns: NetworkNamespace) async throws {
        try await ns.ip("link", "set", "lo", "up")
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let state = try NamespacedHaul(ns, ["net", "--json"])
        #expect(await state.exitStatus(timeout: 20) == 0)
        let line = state.stdoutLines.first ?? ""
        #expect(line.contains("\"status\":\"unsatisfied\""), "only loopback: \(line)")
        #expect(line.contains("\"interfaces\":[{\"name\":\"lo\",\"kind\":\"loopback\",\"up\":true"), "\(line)")
        #expect(!line.contains("},{"), "one interface: \(line)")
        let haul = try NamespacedHaul(ns, ["get", "--no-wait", "-o", dir.file("x"), "http://10.77.0.1:8080/x"])
        let status = await haul.exitStatus(timeout: 20)
        #expect(status == 3)
        #expect(haul.stderr.contains("no usable network: no default route (--no-wait)"), "\(haul.stderr)")
        // Without --no-wait it waits (and says so) instead of failing.
        let waiting = try NamespacedHaul(ns, ["get", "-o", dir.file("y"), "http://10.77.0.1:8080/y"])
        #expect(await eventually(timeout: 10) { waiting.stderr.contains("waiting for network: no default route") })
        #expect(waiting.process.isRunning)
        waiting.stop()
        _ = await waiting.exitStatus()
    }

    @Test func checkHostReportsAnUnreachableHostAtOnce() async throws {
        try await LinkedNamespaces.with { net in try await unreachable(net) }
    }

    func unreachable(_ net: LinkedNamespaces) async throws {
        try await net.addDefaultRoute()
        try await net.client.ip("route", "add", "unreachable", "10.99.0.0/16")
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let haul = try NamespacedHaul(
            net.client, ["get", "--check-host", "-o", dir.file("x"), "http://10.99.0.5:8080/x"])
        let status = await haul.exitStatus(timeout: 20)
        #expect(status == 3)
        #expect(haul.stderr.contains("unreachable host: no route to 10.99.0.5"), "\(haul.stderr)")
        #expect(dir.contents().isEmpty, "nothing written")
    }
}
