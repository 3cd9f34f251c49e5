import Foundation
import Haul
import HaulTestSupport
import HaulTestTraits
import Observation
import Testing

@testable import HaulCore

@Suite("The network activity count", .fewAtOnce)
struct ActivityTests {
    @Test func countsTransfersWhileOnTheWireAndTellsObservers() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let session = HaulSession()
        #expect(session.activity.activeTransfers == 0)
        #expect(!session.activity.isActive)
        let seen = Locked<[Int]>([])
        // Subscribed here, before the downloads start (inside the task it could come too late,
        // and then its first value was already 2).
        let updates = session.activity.updates
        let collector = Task {
            for await count in updates {
                seen.withLock { $0.append(count) }
                if count == 0 && seen.get().count > 1 { return }
            }
        }
        let observed = Locked(false)
        withObservationTracking {
            _ = session.activity.activeTransfers
        } onChange: {
            observed.set(true)
        }
        let a = Task {
            try await session.download(from: server.url("/a.bin?size=600000&rate=400000"), to: .directory(dir.url))
        }
        let b = Task {
            try await session.download(from: server.url("/b.bin?size=600000&rate=400000"), to: .directory(dir.url))
        }
        #expect(await eventually(timeout: 10) { session.activity.activeTransfers == 2 })
        #expect(observed.get(), "Observation saw the change")
        // The process-wide count includes these two (other tests may add their own).
        #expect(NetworkActivity.shared.activeTransfers >= 2)
        _ = try await (a.value, b.value)
        #expect(await eventually(timeout: 10) { session.activity.activeTransfers == 0 })
        await collector.value
        let counts = seen.get()
        #expect(counts.first == 0)
        #expect(counts.max() == 2)
        #expect(counts.last == 0)
        #expect(zip(counts, counts.dropFirst()).allSatisfy { abs($0 - $1) == 1 }, "one step at a time: \(counts)")
    }

    @Test func aManagerSharesItsSessionsCount() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        var c = DownloadManager.Configuration()
        c.persistence = .ephemeral
        let manager = try DownloadManager(configuration: c)
        for n in 0..<3 { manager.add(server.url("/m\(n).bin?size=500000&rate=400000"), to: .directory(dir.url)) }
        #expect(await eventually(timeout: 10) { manager.activity.activeTransfers == 2 }, "two per host")
        await manager.waitUntilIdle()
        #expect(await eventually(timeout: 10) { manager.activity.activeTransfers == 0 })
    }
}
