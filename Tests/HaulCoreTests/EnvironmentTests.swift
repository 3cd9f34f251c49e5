import Foundation
import Testing

@testable import HaulCore

/// `Environment`: names looked up one at a time, in the process or a table, with overrides.
struct EnvironmentTests {
    @Test func theProcessEnvironmentIsWhatProcessInfoHas() {
        let all = ProcessInfo.processInfo.environment
        for name in ["PATH", "HOME"] { #expect(Environment.process[name] == all[name], "\(name)") }
        #expect(Environment.process["HAUL_TEST_SURELY_UNSET_\(UInt64.random(in: 0...UInt64.max))"] == nil)
    }

    @Test func aTableIsReadAsGivenAndNothingElse() {
        let table: Environment = ["HOME": "/home/u", "EMPTY": ""]
        #expect(table["HOME"] == "/home/u")
        #expect(table["EMPTY"] == "")
        #expect(table["PATH"] == nil)  // the process's PATH does not show through a table
    }

    @Test func overridesSetAndUnsetOverTheTable() {
        let base = Environment(["no_proxy": "a", "NO_PROXY": "b", "http_proxy": "p"])
        let changed = base.overriding(["no_proxy": "c", "NO_PROXY": .none])
        #expect(changed["no_proxy"] == "c")
        #expect(changed["NO_PROXY"] == nil)
        #expect(changed["http_proxy"] == "p")
        #expect(base["NO_PROXY"] == "b")  // the original is unchanged
        // Over the process's: a name unset by an override is unset whatever the process has.
        #expect(Environment.process.overriding(["PATH": .none])["PATH"] == nil)
    }

    /// A session's `noProxy` replaces the environment's list, as libcurl's CURLOPT_NOPROXY does:
    /// an empty one sends every host to the proxy whatever NO_PROXY says.
    @Test func aSessionsNoProxyListReplacesTheEnvironments() {
        let url = URL(string: "http://far.example/x")!
        let environment = Environment(["http_proxy": "http://p:3128", "NO_PROXY": "far.example"])
        #expect(!Reachability.proxyApplies(to: url, environment: environment))
        let replaced = environment.overriding(["no_proxy": "", "NO_PROXY": .none])
        #expect(Reachability.proxyApplies(to: url, environment: replaced))
    }

    /// The umask as /proc/PID/status gives it: octal after `Umask:`; anything else is no answer.
    @Test(arguments: [
        ("Name:\thaul\nUmask:\t0022\nState:\tR\n", 0o022 as mode_t?),
        ("Umask:\t0077\n", 0o077),
        ("Umask:\t0000", 0),
        ("Umask:\t0778\n", nil),  // 8 is no octal digit
        ("Umask:\t\n", nil),
        ("Umask:\t00000000022\n", nil),  // longer than any mode
        ("Name:\thaul\nState:\tR\n", nil),
        ("XUmask:\t0022\n", nil),
    ])
    func theUmaskIsReadFromStatusBytes(status: String, umask: mode_t?) {
        #expect(Sys.statusUmask(Array(status.utf8)) == umask)
    }

    /// Where the kernel has the line (Linux 4.7), this process's umask is read from it.
    @Test func theProcessStatusUmaskIsRead() throws {
        let status = try #require(try Sys.readSmallFile("/proc/self/status", limit: 64 << 10))
        guard String(decoding: status, as: UTF8.self).contains("\nUmask:") else { return }
        let umask = try #require(Sys.statusUmask(status))
        #expect(umask & ~0o777 == 0)
    }
}
