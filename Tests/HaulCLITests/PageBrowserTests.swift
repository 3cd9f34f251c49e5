import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

/// haul serve's page in a real headless browser (Debian's chromium, chromium-driver and
/// python3-selenium; `.ci/run` installs them): it loads, a running download's bar moves,
/// pause stops the server's transfer, resume finishes it from its bytes, and the file is
/// exact. Skipped, saying so, where the browser is not installed.
@Suite("haul serve's page in headless Chromium", .serialized, .fewAtOnce)
struct PageBrowserTests {
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("scripts/page-test.py").path

    /// Why the browser test cannot run here, or nil.
    static let missing: String? = {
        for tool in ["/usr/bin/chromium", "/usr/bin/chromedriver", "/usr/bin/python3"]
        where !FileManager.default.isExecutableFile(atPath: tool) {
            return "\(tool) is not installed (apt-get install chromium chromium-driver python3-selenium)"
        }
        let probe = Process()
        probe.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        probe.arguments = ["-c", "import selenium"]
        probe.standardError = FileHandle.nullDevice
        guard (try? probe.run()) != nil else { return "python3 cannot run" }
        probe.waitUntilExit()
        return probe.terminationStatus == 0 ? nil : "python3-selenium is not installed"
    }()

    @Test(.enabled(if: missing == nil, "no headless browser: \(missing ?? "")"))
    func thePageShowsAMovingBarAndItsPauseAndResumeReachTheTransfer() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let environment = ["XDG_STATE_HOME": dir.path + "/state", "HOME": dir.path + "/home"]
        let root = dir.path + "/root"
        let daemon = try CLI.start(["serve", "--port", "0", "-d", root], environment: environment)
        defer { daemon.killGroup() }
        let state = dir.path + "/state/haul/serve"
        try #require(await eventually { FileManager.default.fileExists(atPath: state + "/address") })
        let address = String(decoding: contents(state + "/address"), as: UTF8.self).trimmingCharacters(
            in: .whitespacesAndNewlines)
        let token = String(decoding: contents(state + "/token"), as: UTF8.self).trimmingCharacters(
            in: .whitespacesAndNewlines)
        let path = "/files/page.iso"
        let url = server.url("\(path)?size=900000&rate=200000&seed=9").absoluteString
        let second = server.url("/files/next.iso?size=5000000&rate=100000&seed=2").absoluteString
        // HAUL_PAGE_SHOTS=docs/images keeps the screenshots (the README shows them).
        let shots = ProcessInfo.processInfo.environment["HAUL_PAGE_SHOTS"] ?? dir.path
        let browser = try ChildProcess(
            "/usr/bin/python3", [Self.script, url, shots, "--second", second],
            environment: ["HAUL_PAGE_URL": "\(address)/#token=\(token)"])
        let status = await browser.finish(timeout: 180)
        let said = String(decoding: browser.stderr, as: UTF8.self) + String(decoding: browser.stdout, as: UTF8.self)
        #expect(status == 0, "\(said)")
        // What the server saw: the pause ended the first request; the resume asked for the rest.
        let requests = server.requests(path: path)
        #expect(requests.count == 2 && (requests.last?.rangeStart ?? 0) > 0, "\(requests.map(\.headers))")
        expectFile(root + "/page.iso", equals: TestContent.bytes(seed: 9, count: 900_000))
        for shot in ["page-light.png", "page-dark.png"] {
            #expect(
                (try? FileManager.default.attributesOfItem(atPath: shots + "/" + shot)[.size] as? Int) ?? 0 > 10_000)
        }
    }
}
