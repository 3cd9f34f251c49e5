import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

/// Classification from fake sysfs/procfs trees (no real interfaces touched).
@Suite("Network state from sysfs and procfs", .fewAtOnce)
struct NetworkProbeTests {
    struct FakeInterface {
        var name: String
        var type = "1"
        var operstate = "up"
        var wireless = false
        var devtype: String?
        var device = true
    }

    /// Writes /sys/class/net and /proc/net look-alikes; `v4` and `v6` name the interfaces with a
    /// default route.
    func tree(
        _ interfaces: [FakeInterface], v4: [String] = [], v6: [String] = []
    ) throws -> (
        TemporaryDirectory, String, String
    ) {
        let root = try TemporaryDirectory("haul-net")
        let sys = root.file("sys/class/net")
        let proc = root.file("proc/net")
        try FileManager.default.createDirectory(atPath: proc, withIntermediateDirectories: true)
        for i in interfaces {
            let dir = sys + "/" + i.name
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            try i.type.write(toFile: dir + "/type", atomically: true, encoding: .utf8)
            try i.operstate.write(toFile: dir + "/operstate", atomically: true, encoding: .utf8)
            var uevent = "INTERFACE=\(i.name)\n"
            if let devtype = i.devtype { uevent += "DEVTYPE=\(devtype)\n" }
            try uevent.write(toFile: dir + "/uevent", atomically: true, encoding: .utf8)
            if i.wireless {
                try FileManager.default.createDirectory(atPath: dir + "/wireless", withIntermediateDirectories: true)
            }
            if i.device {
                try FileManager.default.createDirectory(atPath: dir + "/device", withIntermediateDirectories: true)
            }
        }
        var route = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
        for name in v4 { route += "\(name)\t00000000\t0100A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n" }
        for name in interfaces.map(\.name) where !v4.contains(name) {
            route += "\(name)\t0000A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
        }
        try route.write(toFile: proc + "/route", atomically: true, encoding: .utf8)
        var ipv6 = ""
        for name in v6 {
            ipv6 +=
                "00000000000000000000000000000000 00 00000000000000000000000000000000 00 fe800000000000000000000000000001 00000400 00000002 00000000 00000003 \(name)\n"
        }
        ipv6 +=
            "00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo\n"
        try ipv6.write(toFile: proc + "/ipv6_route", atomically: true, encoding: .utf8)
        return (root, sys, proc)
    }

    let lo = FakeInterface(name: "lo", type: "772", operstate: "unknown", device: false)

    @Test func wifiIsThePrimaryWhenItCarriesTheDefaultRoute() throws {
        let (root, sys, proc) = try tree([lo, FakeInterface(name: "wlan0", wireless: true)], v4: ["wlan0"])
        defer { root.remove() }
        let path = NetworkProbe.path(sysClassNet: sys, procNet: proc, addresses: ["wlan0": ["192.168.1.20"]])
        #expect(path.status == .satisfied)
        #expect(path.primary?.name == "wlan0" && path.primary?.kind == .wifi)
        #expect(path.primary?.addresses == ["192.168.1.20"])
        #expect(!path.isExpensive)
    }

    @Test func ethernetIsWired() throws {
        let (root, sys, proc) = try tree([lo, FakeInterface(name: "enp3s0")], v4: ["enp3s0"])
        defer { root.remove() }
        #expect(NetworkProbe.path(sysClassNet: sys, procNet: proc, addresses: [:]).primary?.kind == .wired)
    }

    @Test func wwanIsCellularAndExpensive() throws {
        let (root, sys, proc) = try tree(
            [lo, FakeInterface(name: "wwan0", type: "65534", devtype: "wwan")], v6: ["wwan0"])
        defer { root.remove() }
        let path = NetworkProbe.path(sysClassNet: sys, procNet: proc, addresses: [:])
        #expect(path.status == .satisfied && path.primary?.kind == .cellular && path.isExpensive)
    }

    @Test func bridgeCountsAsWiredAndVethAsOther() throws {
        let (root, sys, proc) = try tree(
            [
                lo, FakeInterface(name: "br0", devtype: "bridge", device: false),
                FakeInterface(name: "veth1", device: false),
            ],
            v4: ["br0"])
        defer { root.remove() }
        let path = NetworkProbe.path(sysClassNet: sys, procNet: proc, addresses: [:])
        #expect(path.primary?.name == "br0" && path.primary?.kind == .wired)
        #expect(path.interfaces.first { $0.name == "veth1" }?.kind == .other)
    }

    @Test func loopbackOnlyIsUnsatisfied() throws {
        let (root, sys, proc) = try tree([lo])
        defer { root.remove() }
        let path = NetworkProbe.path(sysClassNet: sys, procNet: proc, addresses: [:])
        #expect(path.status == .unsatisfied && path.primary == nil)
        #expect(path.reason == "no default route")
    }

    @Test func noDefaultRouteOrADownInterfaceIsUnsatisfied() throws {
        let (root, sys, proc) = try tree([lo, FakeInterface(name: "eth0")])
        defer { root.remove() }
        #expect(NetworkProbe.path(sysClassNet: sys, procNet: proc, addresses: [:]).status == .unsatisfied)
        let (root2, sys2, proc2) = try tree([lo, FakeInterface(name: "eth0", operstate: "down")], v4: ["eth0"])
        defer { root2.remove() }
        let down = NetworkProbe.path(sysClassNet: sys2, procNet: proc2, addresses: [:])
        #expect(down.status == .unsatisfied && down.reason?.contains("down") == true)
    }

    @Test func meteredInterfacesAreExpensive() throws {
        let (root, sys, proc) = try tree([lo, FakeInterface(name: "eth0")], v4: ["eth0"])
        defer { root.remove() }
        #expect(NetworkProbe.path(sysClassNet: sys, procNet: proc, addresses: [:], metered: ["eth0"]).isExpensive)
    }

    @Test func thisMachineReadsWithoutCrashing() {
        let path = NetworkProbe.path()
        #expect(path.interfaces.contains { $0.kind == .loopback })
    }
}

@Suite("Host reachability", .fewAtOnce)
struct ReachabilityTests {
    @Test func aLoopbackHostIsReachable() {
        #expect(Reachability.check(URL(string: "http://127.0.0.1:9/x")!, environment: [:]) == nil)
        #expect(Reachability.check(URL(string: "http://localhost:9/x")!, environment: [:]) == nil)
    }

    @Test func aHostThatDoesNotResolveIsUnreachableWithTheResolversWords() {
        // Not an address (999 > 255), and a name no resolver has (the .invalid-style answer).
        let error = Reachability.check(URL(string: "http://999.1.1.1:9/x")!, environment: [:])
        #expect(error?.code == .unreachableHost)
        #expect(
            error?.message.hasPrefix("unreachable host: cannot resolve 999.1.1.1 (") == true,
            "\(String(describing: error))")
    }

    @Test(arguments: [
        (["http_proxy": "http://p:3128"], "http://far.example/x", true),
        (["HTTP_PROXY": "http://p:3128"], "http://far.example/x", false),  // curl ignores it (httpoxy)
        (["https_proxy": "http://p:3128"], "http://far.example/x", false),
        (["HTTPS_PROXY": "http://p:3128"], "https://far.example/x", true),
        (["all_proxy": "socks5://p"], "https://far.example/x", true),
        (["http_proxy": "http://p:3128", "no_proxy": "example"], "http://far.example/x", false),
        (["http_proxy": "http://p:3128", "no_proxy": ".example"], "http://far.example/x", false),
        (["http_proxy": "http://p:3128", "no_proxy": "*"], "http://far.example/x", false),
        (["http_proxy": "http://p:3128", "no_proxy": "other.org"], "http://far.example/x", true),
    ])
    func theCheckIsSkippedWhenCurlWouldUseAProxy(environment: [String: String], url: String, applies: Bool) {
        #expect(Reachability.proxyApplies(to: URL(string: url)!, environment: Environment(environment)) == applies)
    }
}
