import Foundation
import Haul
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

/// A network the test switches by hand.
final class FakeNetwork: NetworkPathSource, @unchecked Sendable {
    let paths: AsyncStream<NetworkPath>
    private let continuation: AsyncStream<NetworkPath>.Continuation
    private let current = Locked<NetworkPath?>(nil)

    init() { (paths, continuation) = AsyncStream.makeStream(of: NetworkPath.self) }

    var pathNow: NetworkPath? { current.get() }

    static func path(_ kind: InterfaceKind?) -> NetworkPath {
        guard let kind else {
            return NetworkPath(status: .unsatisfied, interfaces: [], primary: nil, isExpensive: false, reason: "test")
        }
        let i = NetworkInterfaceInfo(name: "if0", kind: kind, isUp: true, addresses: [])
        return NetworkPath(status: .satisfied, interfaces: [i], primary: i, isExpensive: kind == .cellular, reason: nil)
    }

    /// Changes the path and reports the change.
    func send(_ kind: InterfaceKind?) {
        current.set(Self.path(kind))
        continuation.yield(Self.path(kind))
    }

    /// Changes the path without reporting it (a change the source has not delivered yet).
    func changeQuietly(_ kind: InterfaceKind?) { current.set(Self.path(kind)) }
}

@Suite("The manager follows the network", .fewAtOnce)
struct NetworkPolicyTests {
    /// An ephemeral manager that watches `network`.
    func manager(
        _ network: FakeNetwork, _ adjust: (inout DownloadManager.Configuration) -> Void = { _ in }
    ) throws -> DownloadManager {
        var c = DownloadManager.Configuration()
        c.persistence = .ephemeral
        c.network = network
        c.appliesNetworkPolicyToLoopback = true  // the test server is on 127.0.0.1
        adjust(&c)
        return try DownloadManager(configuration: c)
    }
    /// What the express way of `haul get -j` asks before each URL: the queue's word now, from
    /// the watcher's last path.
    @Test func mayStartNowFollowsThePathAndThePolicy() async throws {
        let network = FakeNetwork()
        let remote = URL(string: "http://example.invalid/f")!
        let local = URL(string: "http://127.0.0.1:9/f")!
        network.send(nil)
        let offline = try manager(network) { $0.appliesNetworkPolicyToLoopback = false }
        #expect(await eventually(timeout: 10) { !offline.mayStartNow(remote) })
        #expect(offline.mayStartNow(local), "loopback needs no network")
        network.send(.wifi)
        #expect(await eventually(timeout: 10) { offline.mayStartNow(remote) })
        let cellular = FakeNetwork()
        cellular.send(.cellular)
        let noCellular = try manager(cellular) { $0.allowsCellularAccess = false }
        #expect(await eventually(timeout: 10) { !noCellular.mayStartNow(remote) })
        var unwatched = DownloadManager.Configuration()
        unwatched.persistence = .ephemeral
        #expect(try DownloadManager(configuration: unwatched).mayStartNow(remote))
    }

    @Test func downloadsWaitWhileOfflineAndContinueFromTheirBytes() async throws {
        // The first answer stalls after 1 MB: a throttled one can be all there before the network
        // goes (likely the one failure in five loaded runs, where the last request started at 0:
        // that would be the check of a file already complete).
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let network = FakeNetwork()
        network.send(.wifi)
        let manager = try manager(network)
        let id = manager.add(server.url("/net.bin?size=4000000&stall=1000000&stalls=1"), to: .directory(dir.url))
        #expect(await eventually(timeout: 10) { (manager.item(id)?.progress?.completedBytes ?? 0) > 300_000 })
        network.send(nil)
        #expect(await eventually(timeout: 30) { manager.item(id)?.state == .waitingForNetwork })
        try await Task.sleep(nanoseconds: 300_000_000)
        let requests = server.requests.count
        try await Task.sleep(nanoseconds: 500_000_000)
        #expect(server.requests.count == requests, "no request while offline")
        network.send(.wired)
        await manager.waitUntilIdle()
        #expect(manager.item(id)?.state == .completed)
        expectFile(dir.file("net.bin"), equals: TestContent.bytes(count: 4_000_000))
        #expect((server.requests(path: "/net.bin").last?.rangeStart ?? 0) > 0)
    }

    @Test func aNetworkThatComesBackAtOnceContinuesTheSameTransferFromItsBytes() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let network = FakeNetwork()
        network.send(.wifi)
        let manager = try manager(network)
        let id = manager.add(server.url("/flip.bin?size=3000000&rate=1500000"), to: .directory(dir.url))
        #expect(await eventually(timeout: 10) { (manager.item(id)?.progress?.completedBytes ?? 0) > 300_000 })
        for _ in 0..<3 {
            network.send(nil)
            network.send(.wired)
        }
        await manager.waitUntilIdle()
        #expect(manager.item(id)?.state == .completed)
        expectFile(dir.file("flip.bin"), equals: TestContent.bytes(count: 3_000_000))
        let starts = server.requests(path: "/flip.bin").map { $0.rangeStart ?? 0 }
        #expect(starts.first == 0 && zip(starts, starts.dropFirst()).allSatisfy { $0 < $1 }, "\(starts)")
    }

    @Test func aResumeRightAfterTheNetworkFailedADownloadContinuesFromItsBytes() async throws {
        // Without waiting for connectivity the lost network fails the download and cancels its
        // transfer; a resume that comes while that transfer is still stopping (here its last
        // checkpoint waits for a slow fsync) must wait for it, where a new transfer found no
        // record yet and started the same partial over from byte 0. The first answer stalls after
        // 1 MB: under a full test run a throttled one was sometimes all there before the network
        // went, and the resume found the file complete.
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let hold = SyncHold([dir.file("back.bin.part")])
        defer { hold.remove() }
        let network = FakeNetwork()
        network.send(.wifi)
        let manager = try manager(network) { $0.waitsForConnectivity = false }
        let id = manager.add(server.url("/back.bin?size=3000000&stall=1000000&stalls=1"), to: .directory(dir.url))
        #expect(await eventually(timeout: 10) { (manager.item(id)?.progress?.completedBytes ?? 0) > 300_000 })
        network.send(nil)
        #expect(await eventually(timeout: 5) { manager.item(id)?.state == .failed })
        network.send(.wired)
        #expect(await eventually(timeout: 5) { manager.networkUnavailableReason == nil })
        #expect(await eventually(timeout: 5) { !hold.held.isEmpty }, "the cancelled transfer's checkpoint waits")
        manager.resume(id)
        try await Task.sleep(nanoseconds: 300_000_000)
        hold.release()
        await manager.waitUntilIdle()
        #expect(manager.item(id)?.state == .completed, "\(String(describing: manager.item(id)?.error))")
        expectFile(dir.file("back.bin"), equals: TestContent.bytes(count: 3_000_000))
        let starts = server.requests(path: "/back.bin").map { $0.rangeStart ?? 0 }
        #expect(starts.count == 2 && starts[0] == 0 && starts.last! > 0, "\(starts)")
    }

    @Test func cellularIsAvoidedWhenNotAllowed() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let network = FakeNetwork()
        let manager = try manager(network) { $0.allowsCellularAccess = false }
        network.send(.cellular)
        try await Task.sleep(nanoseconds: 100_000_000)
        manager.add(server.url("/cell.bin?size=1000"), to: .directory(dir.url))
        try await Task.sleep(nanoseconds: 400_000_000)
        #expect(server.requests.isEmpty)
        network.send(.wifi)
        await manager.waitUntilIdle()
        expectFile(dir.file("cell.bin"), equals: TestContent.bytes(count: 1000))
    }

    @Test func failsInsteadOfWaitingWhenAskedTo() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let network = FakeNetwork()
        let manager = try manager(network) {
            $0.waitsForConnectivity = false
            $0.maxConcurrentDownloads = 1  // the second one stays queued
        }
        network.send(.wired)
        let id = manager.add(server.url("/nowait.bin?size=4000000&stall=1000000&stalls=1"), to: .directory(dir.url))
        #expect(await eventually(timeout: 10) { (manager.item(id)?.progress?.completedBytes ?? 0) > 100_000 })
        let reported = Locked<HaulError?>(nil)
        let queued = manager.add(
            server.url("/nowait2.bin?size=1000"), to: .directory(dir.url),
            completion: { if case .failure(let e) = $0 { reported.set(e) } })
        network.send(nil)
        await manager.waitUntilIdle()
        #expect(manager.item(id)?.state == .failed)
        #expect(manager.item(id)?.error?.code == .networkUnavailable)
        #expect(manager.item(id)?.error?.message == "no usable network: test")
        #expect(await eventually(timeout: 5) { reported.get()?.code == .networkUnavailable }, "its completion is told")
        #expect(manager.item(queued)?.state == .failed)
        #expect(manager.networkUnavailableReason == "test")
        // One added while the network is gone fails with the same reason.
        let late = manager.add(server.url("/nowait3.bin?size=1000"), to: .directory(dir.url))
        await manager.waitUntilIdle()
        #expect(manager.item(late)?.error?.message == "no usable network: test")
        // The bytes stay for a later resume.
        #expect(await eventually(timeout: 5) { FileManager.default.fileExists(atPath: dir.file("nowait.bin.part")) })
        network.send(.wired)
        #expect(await eventually(timeout: 5) { manager.networkUnavailableReason == nil })
    }

    @Test func loopbackDownloadsAreNotHeldByDefault() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let network = FakeNetwork()
        let manager = try manager(network) { $0.appliesNetworkPolicyToLoopback = false }
        network.send(nil)
        try await Task.sleep(nanoseconds: 100_000_000)
        let id = manager.add(server.url("/local.bin?size=5000"), to: .directory(dir.url))
        await manager.waitUntilIdle()
        #expect(manager.item(id)?.state == .completed)
        expectFile(dir.file("local.bin"), equals: TestContent.bytes(count: 5000))
    }

    @Test func aFailureThatArrivesBeforeThePathChangeWaitsInsteadOfFailing() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let network = FakeNetwork()
        network.send(.wifi)
        // No retries: the dropped connection reaches the manager as a failure at once.
        let manager = try manager(network) { $0.session.retry.maxRetries = 0 }
        let other = manager.add(server.url("/other.bin?size=4000000&rate=1000000"), to: .directory(dir.url))
        network.changeQuietly(nil)  // the path is gone, and the source has not said so yet
        let id = manager.add(server.url("/dies.bin?size=3000000&drop=1000000&drops=1"), to: .directory(dir.url))
        #expect(await eventually(timeout: 30) { manager.item(id)?.state == .waitingForNetwork })
        #expect(manager.item(id)?.error == nil)
        // The others stop too, as if the source had reported the change.
        #expect(await eventually(timeout: 10) { manager.item(other)?.state == .waitingForNetwork })
        network.changeQuietly(.wifi)  // back, again without a report: the manager looks by itself
        await manager.waitUntilIdle()
        #expect(manager.item(id)?.state == .completed)
        expectFile(dir.file("dies.bin"), equals: TestContent.bytes(count: 3_000_000))
        #expect((server.requests(path: "/dies.bin").last?.rangeStart ?? 0) > 0, "continued from its bytes")
        expectFile(dir.file("other.bin"), equals: TestContent.bytes(count: 4_000_000))
    }
}
