import Foundation
import Haul
import HaulTestSupport
import Testing

@testable import HaulCore

/// A network the test switches by hand.
final class FakeNetwork: NetworkPathSource, @unchecked Sendable {
    let paths: AsyncStream<NetworkPath>
    private let continuation: AsyncStream<NetworkPath>.Continuation

    init() { (paths, continuation) = AsyncStream.makeStream(of: NetworkPath.self) }

    func send(_ kind: InterfaceKind?) {
        guard let kind else {
            continuation.yield(
                NetworkPath(status: .unsatisfied, interfaces: [], primary: nil, isExpensive: false, reason: "test"))
            return
        }
        let i = NetworkInterfaceInfo(name: "if0", kind: kind, isUp: true, addresses: [])
        continuation.yield(
            NetworkPath(status: .satisfied, interfaces: [i], primary: i, isExpensive: kind == .cellular, reason: nil))
    }
}

@Suite("The manager follows the network")
struct NetworkPolicyTests {
    /// An ephemeral manager that watches `network`.
    func manager(
        _ network: FakeNetwork, _ adjust: (inout DownloadManager.Configuration) -> Void = { _ in }
    ) -> DownloadManager {
        var c = DownloadManager.Configuration()
        c.persistence = .ephemeral
        c.network = network
        adjust(&c)
        return DownloadManager(configuration: c)
    }
    @Test func downloadsWaitWhileOfflineAndContinueFromTheirBytes() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let network = FakeNetwork()
        network.send(.wifi)
        let manager = manager(network)
        let id = manager.add(server.url("/net.bin?size=4000000&rate=2000000"), to: .directory(dir.url))
        #expect(await eventually(timeout: 10) { (manager.item(id)?.progress?.completedBytes ?? 0) > 300_000 })
        network.send(nil)
        #expect(await eventually(timeout: 10) { manager.item(id)?.state == .waitingForNetwork })
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

    @Test func cellularIsAvoidedWhenNotAllowed() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let network = FakeNetwork()
        let manager = manager(network) { $0.allowsCellularAccess = false }
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
        let manager = manager(network) { $0.waitsForConnectivity = false }
        network.send(.wired)
        let id = manager.add(server.url("/nowait.bin?size=4000000&rate=1000000"), to: .directory(dir.url))
        #expect(await eventually(timeout: 10) { manager.item(id)?.state == .running })
        network.send(nil)
        await manager.waitUntilIdle()
        #expect(manager.item(id)?.state == .failed)
    }
}
