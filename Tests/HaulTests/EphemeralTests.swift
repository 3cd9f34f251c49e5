import Foundation
import Haul
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

/// `HaulConfiguration.ephemeral` and `.default`, as URLSession names them.
@Suite("Session configurations: .default and .ephemeral", .fewAtOnce)
struct EphemeralTests {
    static func session(_ base: HaulConfiguration, _ dir: TemporaryDirectory) -> HaulSession {
        var c = base
        c.retry.initialDelay = 0.05
        c.timeout.idle = 60  // the stall must not end in a retry while the test cancels it
        c.stateDirectory = dir.url.appendingPathComponent("state")
        return HaulSession(configuration: c)
    }

    /// Cancels a download stalled after its first megabyte; returns what is left in `dir`.
    static func cancelStalled(_ base: HaulConfiguration, connections: Int) async throws -> [String] {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let session = session(base, dir)
        let dest = dir.url.appendingPathComponent("stall.bin")
        var options = DownloadOptions()
        options.connections = connections
        let download = Task {
            try await session.download(
                from: server.url("/stall?size=3000000&stall=1000000"), to: .file(dest), options: options)
        }
        let written = await eventually(timeout: 60) {
            ((try? Sys.status(dest.path + ".part")) ?? nil)?.size ?? 0 > 0 && fileExists(dest.path + ".haul")
        }
        #expect(written)
        download.cancel()
        let result = await download.result
        #expect((try? result.get()) == nil)
        return dir.contents().sorted()
    }

    @Test(arguments: [1, 4])
    func aCancelledDownloadLeavesNothingInAnEphemeralSession(connections: Int) async throws {
        #expect(try await Self.cancelStalled(.ephemeral, connections: connections) == [])
        let kept = try await Self.cancelStalled(.default, connections: connections)
        #expect(kept == ["stall.bin.haul", "stall.bin.part"])
    }

    @Test func anEphemeralSessionKeepsNoValidatorsAndNoCache() async throws {
        #expect(HaulConfiguration.ephemeral.cache == nil && HaulConfiguration.ephemeral.isEphemeral)
        #expect(HaulConfiguration.default.cache === HTTPCache.shared && !HaulConfiguration.default.isEphemeral)
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        var options = DownloadOptions()
        options.revalidatesExistingFile = true
        let dest = dir.url.appendingPathComponent("f.bin")
        for _ in 0..<2 {
            _ = try await Self.session(.ephemeral, dir).download(
                from: server.url("/f?size=5000"), to: .file(dest), options: options)
        }
        #expect(dir.contents() == ["f.bin"], "no state directory")
        let asked = server.requests(path: "/f")
        #expect(asked.count == 2 && asked[1].header("If-None-Match") == nil)
        #expect(asked[1].header("If-Modified-Since") == HTTPDate.format(1_767_225_600), "asked about by its time")
    }
}
