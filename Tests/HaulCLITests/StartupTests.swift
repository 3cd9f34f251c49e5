import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

/// What every start of `haul` loads (docs/startup.md).
@Suite("What haul loads at start", .fewAtOnce)
struct StartupTests {
    /// The libraries the loader maps and starts (glibc's `LD_DEBUG=libs` names each): Foundation
    /// proper (with its ICU data) and FoundationNetworking (with a libcurl of its own) were 33
    /// of the 52 that a `haul --version` mapped; libcurl itself waits for a command that transfers.
    @Test func aStartLoadsNeitherFoundationNorFoundationNetworkingNorLibcurl() async throws {
        let run = try await CLI.run(["--version"], environment: ["LD_DEBUG": "libs"])
        #expect(run.status == 0)
        let started = run.stderr.split(separator: "\n").filter { $0.contains("calling init:") }
        #expect(started.contains { $0.contains("libc.so") }, "LD_DEBUG said nothing: \(run.stderr.prefix(500))")
        for name in ["libFoundation.so", "libFoundationNetworking.so", "lib_FoundationICU.so", "libcurl"] {
            #expect(!started.contains { $0.contains(name) }, "haul --version loads \(name)")
        }
    }

    /// `--version` answers without loading libcurl (scripts ask it to check what they run);
    /// `haul version` loads it to name it.
    @Test func versionAloneAndWithTheLibcurlItLoads() async throws {
        let short = try await CLI.run(["--version"])
        #expect(short.status == 0)
        #expect(short.stdout.hasPrefix("haul ") && !short.stdout.contains("libcurl"), "\(short.stdout)")
        #expect(short.stdout.split(separator: "\n").count == 1)
        let long = try await CLI.run(["version"])
        #expect(long.status == 0)
        #expect(long.stdout.hasPrefix(short.stdout.trimmingCharacters(in: .newlines) + " (libcurl/"), "\(long.stdout)")
    }

    /// libcurl is loaded when a download first needs it, and a download checks for it before it
    /// touches the disk: without it, `-d DIR` is not created and nothing is written or removed.
    @Test func withoutLibcurlADownloadFailsBeforeItTouchesTheDisk() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let target = dir.path + "/new"
        let run = try await CLI.run(
            ["get", "-d", target, "http://127.0.0.1:9/x.bin"],
            environment: ["HAUL_TEST_LIBCURL": "/nonexistent/libcurl.so.4"])
        #expect(run.status != 0)
        #expect(run.stderr.contains("libcurl is not available"), "\(run.stderr)")
        #expect(run.stderr.split(separator: "\n").count == 1, "\(run.stderr)")
        #expect(dir.contents().isEmpty, "\(dir.contents())")
    }
}
