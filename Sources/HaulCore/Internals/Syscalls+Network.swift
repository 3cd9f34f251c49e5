#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// The network half of the syscall seam: an rtnetlink socket for change events, a wake-up
/// pipe, poll, and the route lookup behind host reachability.
extension Sys {
    /// rtnetlink multicast groups (linux/rtnetlink.h; not imported by Glibc): links, IPv4 and
    /// IPv6 addresses, IPv4 and IPv6 routes.
    package static let routeChangeGroups: UInt32 = 0x1 | 0x10 | 0x40 | 0x100 | 0x400

    /// `struct sockaddr_nl` (linux/netlink.h), which Glibc does not import.
    private struct SockaddrNL {
        var family = UInt16(AF_NETLINK)
        var pad: UInt16 = 0
        var pid: UInt32 = 0
        var groups: UInt32
    }

    /// Opens a non-blocking NETLINK_ROUTE socket subscribed to `groups`.
    package static func openRouteEvents(groups: UInt32 = routeChangeGroups) throws(Errno) -> Int32 {
        #if os(Linux)
            let netlinkRoute: Int32 = 0
            let fd = socket(
                AF_NETLINK, Int32(SOCK_RAW.rawValue | SOCK_CLOEXEC.rawValue | SOCK_NONBLOCK.rawValue), netlinkRoute)
            guard fd >= 0 else { throw Errno.current }
            var address = SockaddrNL(groups: groups)
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(fd, $0, socklen_t(MemoryLayout<SockaddrNL>.size))
                }
            }
            guard bound == 0 else {
                let error = Errno.current
                close(fd)
                throw error
            }
            return fd
        #else
            throw Errno(EAFNOSUPPORT)
        #endif
    }

    /// A close-on-exec pipe: (read end, write end).
    package static func makePipe() throws(Errno) -> (Int32, Int32) {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw Errno.current }
        for fd in fds {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            _ = fcntl(fd, F_SETFL, O_NONBLOCK)
        }
        return (fds[0], fds[1])
    }

    /// Waits until one of `fds` is readable (or `timeoutMilliseconds` pass; -1 waits forever);
    /// returns the readable ones.
    package static func waitReadable(_ fds: [Int32], timeoutMilliseconds: Int32 = -1) -> [Int32] {
        var polls = fds.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
        while true {
            let r = poll(&polls, nfds_t(polls.count), timeoutMilliseconds)
            if r >= 0 { break }
            if errno != EINTR { return [] }
        }
        return polls.filter { $0.revents != 0 }.map(\.fd)
    }

    /// Reads and discards everything waiting on a non-blocking descriptor.
    package static func drain(_ fd: Int32) {
        var buffer = [UInt8](repeating: 0, count: 16 << 10)
        while buffer.withUnsafeMutableBytes({ read(fd, $0.baseAddress, $0.count) }) > 0 {}
    }

    /// Writes one byte (a wake-up).
    package static func poke(_ fd: Int32) {
        var byte: UInt8 = 1
        _ = write(fd, &byte, 1)
    }

    /// Resolves `host` to numeric addresses (IPv4 and IPv6), or throws the resolver's message.
    package static func resolve(_ host: String, port: Int) throws(ResolveError) -> [ResolvedAddress] {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_DGRAM.rawValue)
        hints.ai_family = AF_UNSPEC
        var list: UnsafeMutablePointer<addrinfo>?
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        let r = getaddrinfo(bare, String(port), &hints, &list)
        guard r == 0, let first = list else { throw ResolveError(message: String(cString: gai_strerror(r))) }
        defer { freeaddrinfo(list) }
        var result: [ResolvedAddress] = []
        var cursor: UnsafeMutablePointer<addrinfo>? = first
        while let entry = cursor {
            defer { cursor = entry.pointee.ai_next }
            guard let sa = entry.pointee.ai_addr else { continue }
            let bytes = Array(UnsafeRawBufferPointer(start: sa, count: Int(entry.pointee.ai_addrlen)))
            let numeric = numericHost(sa, length: entry.pointee.ai_addrlen) ?? ""
            if !result.contains(where: { $0.text == numeric }) {
                result.append(ResolvedAddress(family: entry.pointee.ai_family, sockaddr: bytes, text: numeric))
            }
        }
        return result
    }

    /// An address as numeric text (`10.0.0.1`, `fe80::1%eth0`), nil when getnameinfo fails.
    package static func numericHost(_ address: UnsafePointer<sockaddr>, length: socklen_t) -> String? {
        var text = [CChar](repeating: 0, count: Int(NI_MAXHOST))
        guard getnameinfo(address, length, &text, socklen_t(text.count), nil, 0, NI_NUMERICHOST) == 0 else {
            return nil
        }
        return text.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }

    /// Whether the kernel has a route to `address`: connecting a UDP socket looks the route up
    /// and sends nothing. Returns nil when it has, else the errno (ENETUNREACH, EHOSTUNREACH…).
    package static func routeError(to address: ResolvedAddress) -> Errno? {
        let fd = socket(address.family, Int32(SOCK_DGRAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return Errno.current }
        defer { close(fd) }
        let r = address.sockaddr.withUnsafeBytes { raw in
            connect(fd, raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), socklen_t(raw.count))
        }
        return r == 0 ? nil : Errno.current
    }
}

/// A resolver failure, with getaddrinfo's message.
package struct ResolveError: Error, Sendable {
    package var message: String
}

/// One address a host name resolved to.
package struct ResolvedAddress: Sendable {
    package var family: Int32
    package var sockaddr: [UInt8]
    package var text: String
}
