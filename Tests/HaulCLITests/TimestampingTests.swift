import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

@Suite("haul get -N/--timestamping", .fewAtOnce)
struct TimestampingTests {
    @Test func aSecondRunSaysUpToDateAndANewVersionReplacesTheFile() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let environment = ["XDG_STATE_HOME": dir.file("state")]
        let url = server.url("/ts.bin?size=5000").absoluteString
        let first = try await CLI.run(["get", "-N", "-o", dir.file("ts.bin"), url], environment: environment)
        #expect(first.status == 0, "\(first.stderr)")
        let second = try await CLI.run(["get", "-N", "-o", dir.file("ts.bin"), url], environment: environment)
        #expect(second.status == 0, "\(second.stderr)")
        #expect(second.stderr.contains("ts.bin is up to date (not modified on the server, "), "\(second.stderr)")
        #expect(server.requests(path: "/ts.bin").last?.header("If-None-Match") == "\"s1-v0-5000\"")

        let changing = server.url("/ch.bin?size=5000&change=1").absoluteString
        _ = try await CLI.run(["get", "-N", "-o", dir.file("ch.bin"), changing], environment: environment)
        let replaced = try await CLI.run(
            ["get", "-N", "--json", "-o", dir.file("ch.bin"), changing], environment: environment)
        #expect(replaced.status == 0, "\(replaced.stderr)")
        #expect(replaced.stdout.contains("\"alreadyComplete\":false"), "\(replaced.stdout)")
        #expect(
            try Data(contentsOf: URL(fileURLWithPath: dir.file("ch.bin")))
                == Data(TestContent.bytes(version: 1, count: 5000)))
    }

    @Test func itDoesNotApplyToStandardOutput() async throws {
        let r = try await CLI.run(["get", "-N", "-o", "-", "http://127.0.0.1:1/x"])
        #expect(r.status == 2)
        #expect(r.stderr.hasPrefix("haul: error: --timestamping does not apply to -o -"), "\(r.stderr)")
    }
}
