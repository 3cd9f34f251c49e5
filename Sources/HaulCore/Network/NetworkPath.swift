#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What kind of link an interface is.
public enum InterfaceKind: String, Sendable, Codable, CaseIterable {
    /// Wireless LAN (`wireless/` or `phy80211` in sysfs).
    case wifi
    /// Ethernet with a device behind it, or a bridge.
    case wired
    /// A mobile broadband modem (`DEVTYPE=wwan`, or a wwan driver).
    case cellular
    /// The loopback interface.
    case loopback
    /// Anything else: veth, dummy, tun, ppp…
    case other
}

/// One network interface.
public struct NetworkInterfaceInfo: Sendable, Equatable, Codable {
    /// Its name, e.g. `wlan0`.
    public var name: String
    /// Its kind.
    public var kind: InterfaceKind
    /// Whether the link is up (`operstate` up, or unknown for links that do not report it).
    public var isUp: Bool
    /// Its IPv4 and IPv6 addresses.
    public var addresses: [String]
}

/// The state of the network, as a download manager needs it.
///
/// `isExpensive` is true on cellular, or on an interface the configuration marks as metered.
/// `isConstrained` is reserved for a low-data mode (no such signal exists on Linux yet; always
/// false).
public struct NetworkPath: Sendable, Equatable {
    /// Whether there is a usable route to the outside.
    public enum Status: String, Sendable, Equatable {
        /// An interface that is up carries a default route.
        case satisfied
        /// No default route over an interface that is up (or only loopback).
        case unsatisfied
    }

    /// Satisfied or not.
    public var status: Status
    /// Every interface, loopback included.
    public var interfaces: [NetworkInterfaceInfo]
    /// The interface of the default route (IPv4 preferred), when satisfied.
    public var primary: NetworkInterfaceInfo?
    /// Cellular, or marked metered.
    public var isExpensive: Bool
    /// Reserved (see the type's documentation); false.
    public var isConstrained: Bool { false }
    /// Why the path is unsatisfied, in words.
    public var reason: String?
}

/// Reads the network state from sysfs and procfs (roots replaceable for tests) and getifaddrs.
package enum NetworkProbe {
    /// Reads a snapshot.
    /// - Parameters:
    ///   - sysClassNet: usually `/sys/class/net`.
    ///   - procNet: usually `/proc/net` (for `route` and `ipv6_route`).
    ///   - addresses: addresses by interface; nil reads them with getifaddrs.
    ///   - metered: interface names to treat as expensive.
    package static func path(
        sysClassNet: String = "/sys/class/net", procNet: String = "/proc/net", addresses: [String: [String]]? = nil,
        metered: Set<String> = []
    ) -> NetworkPath {
        let addresses = addresses ?? systemAddresses()
        let interfaces = Sys.listDirectory(sysClassNet).sorted().map { name in
            NetworkInterfaceInfo(
                name: name, kind: classify(sysClassNet + "/" + name),
                isUp: ["up", "unknown"].contains(read(sysClassNet + "/" + name + "/operstate") ?? ""),
                addresses: addresses[name] ?? [])
        }
        let routes = defaultRouteInterfaces(procNet: procNet)
        let candidates = routes.compactMap { name in interfaces.first { $0.name == name } }
        guard let primary = candidates.first(where: { $0.isUp && $0.kind != .loopback }) else {
            let reason =
                routes.isEmpty
                ? "no default route" : "the default route's interface (\(routes.joined(separator: ", "))) is down"
            return NetworkPath(
                status: .unsatisfied, interfaces: interfaces, primary: nil, isExpensive: false, reason: reason)
        }
        return NetworkPath(
            status: .satisfied, interfaces: interfaces, primary: primary,
            isExpensive: primary.kind == .cellular || metered.contains(primary.name), reason: nil)
    }

    /// The kind of the interface whose sysfs directory is `dir`.
    package static func classify(_ dir: String) -> InterfaceKind {
        if read(dir + "/type") == "772" { return .loopback }
        if Sys.isDirectory(dir + "/wireless") || Sys.isDirectory(dir + "/phy80211") { return .wifi }
        let uevent = read(dir + "/uevent") ?? ""
        let devtype = uevent.split(separator: "\n").first { $0.hasPrefix("DEVTYPE=") }.map { String($0.dropFirst(8)) }
        switch devtype {
        case "wwan": return .cellular
        case "wlan": return .wifi
        case "bridge": return .wired
        default: break
        }
        if let driver = try? FileManager.default.destinationOfSymbolicLink(atPath: dir + "/device/driver") {
            let name = driver.split(separator: "/").last.map(String.init) ?? driver
            if ["qmi_wwan", "cdc_mbim", "option", "sierra_net", "huawei_cdc_ncm"].contains(name) { return .cellular }
        }
        // Ethernet (ARPHRD_ETHER) with a device behind it is a real port; veth, dummy and
        // friends have no device/.
        if read(dir + "/type") == "1", Sys.isDirectory(dir + "/device") { return .wired }
        return .other
    }

    /// Interfaces carrying a default route: IPv4 ones first, then IPv6.
    package static func defaultRouteInterfaces(procNet: String) -> [String] {
        var names: [String] = []
        for line in (read(procNet + "/route") ?? "").split(separator: "\n").dropFirst() {
            let f = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            // Iface Destination Gateway Flags RefCnt Use Metric Mask …; RTF_UP = 1.
            guard f.count >= 8, f[1] == "00000000", f[7] == "00000000", let flags = Int(f[3], radix: 16), flags & 1 == 1
            else { continue }
            if !names.contains(String(f[0])) { names.append(String(f[0])) }
        }
        for line in (read(procNet + "/ipv6_route") ?? "").split(separator: "\n") {
            let f = line.split(separator: " ", omittingEmptySubsequences: true)
            // dest plen src plen nexthop metric refcnt use flags iface; RTF_UP = 1, RTF_REJECT = 0x200.
            guard f.count >= 10, f[0].allSatisfy({ $0 == "0" }), f[1] == "00", let flags = Int(f[8], radix: 16),
                flags & 1 == 1, flags & 0x200 == 0, f[9] != "lo"
            else { continue }
            if !names.contains(String(f[9])) { names.append(String(f[9])) }
        }
        return names
    }

    private static func read(_ path: String) -> String? {
        guard let bytes = try? Sys.readSmallFile(path, limit: 64 << 10) else { return nil }
        return String(decoding: bytes, as: UTF8.self).trimmingASCIIWhitespace()
    }

    /// Addresses by interface name, from getifaddrs.
    package static func systemAddresses() -> [String: [String]] {
        var result: [String: [String]] = [:]
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0, let first = list else { return result }
        defer { freeifaddrs(list) }
        var cursor: UnsafeMutablePointer<ifaddrs>? = first
        while let entry = cursor {
            defer { cursor = entry.pointee.ifa_next }
            guard let sa = entry.pointee.ifa_addr else { continue }
            let family = Int32(sa.pointee.sa_family)
            guard family == AF_INET || family == AF_INET6 else { continue }
            let length = socklen_t(family == AF_INET ? MemoryLayout<sockaddr_in>.size : MemoryLayout<sockaddr_in6>.size)
            guard let address = Sys.numericHost(sa, length: length) else { continue }
            result[String(cString: entry.pointee.ifa_name), default: []].append(address)
        }
        return result
    }
}
