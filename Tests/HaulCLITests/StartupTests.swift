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

    /// A libcurl that calls a function no library has (a half-upgraded system): the library's
    /// load binds every function at once and refuses it with a message naming the function;
    /// `haul get`'s own load binds lazily, as the `curl` program's are bound, and the command
    /// ends at the call (docs/startup.md).
    @Test func aLibcurlCallingAMissingFunctionIsRefusedAtTheLibrarysLoad() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let names = [
            "curl_version", "curl_easy_init", "curl_easy_cleanup", "curl_easy_reset", "curl_easy_setopt",
            "curl_easy_getinfo", "curl_easy_pause", "curl_easy_strerror", "curl_multi_init", "curl_multi_cleanup",
            "curl_multi_setopt", "curl_multi_add_handle", "curl_multi_remove_handle", "curl_multi_perform",
            "curl_multi_poll", "curl_multi_wakeup", "curl_multi_info_read", "curl_slist_append",
            "curl_slist_free_all",
        ]
        let source =
            "extern void haul_test_absent(void);\nint curl_global_init(long f) { haul_test_absent(); return 0; }\n"
            + names.map { "void \($0)(void) {}\n" }.joined()
        try source.write(toFile: dir.file("fake.c"), atomically: true, encoding: .utf8)
        let compiler = try #require(
            (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map { "\($0)/clang" }
                .first { FileManager.default.isExecutableFile(atPath: $0) },
            "no clang on PATH (the Swift toolchain has one)")
        let library = dir.file("libcurl.so.4")
        let built = try await CLI.run(
            ["-shared", "-fPIC", "-o", library, dir.file("fake.c")], executable: URL(fileURLWithPath: compiler))
        try #require(built.status == 0, "\(built.stderr)")

        let version = try await CLI.run(["version"], environment: ["HAUL_TEST_LIBCURL": library])
        #expect(version.status == 0)
        #expect(
            version.stdout.contains("libcurl unavailable: cannot load libcurl:")
                && version.stdout.contains("undefined symbol: haul_test_absent"), "\(version.stdout)")

        let get = try await CLI.run(
            ["get", "-d", dir.file("out"), "http://127.0.0.1:9/x.bin"], environment: ["HAUL_TEST_LIBCURL": library])
        #expect(get.status != 0)
        #expect(get.stderr.contains("haul_test_absent"), "\(get.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir.file("out")))
    }
}
