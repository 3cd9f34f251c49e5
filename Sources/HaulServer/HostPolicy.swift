import HaulCore

/// Which `Host` and `Origin` headers the daemon answers to: `localhost`, `127.0.0.1`, `[::1]`
/// and the configured names, each with the daemon's port and nothing else. Anything else is a
/// page on another site reaching the daemon through DNS rebinding (421), or a cross-origin
/// state change (403): Transmission's CVE-2018-5702 fix, with the port checked too.
package struct HostPolicy: Sendable, Equatable {
    /// The port the daemon listens on.
    package var port: Int
    /// The names allowed, lowercased (IPv6 literals in brackets).
    package var names: Set<String>

    /// The policy for `port` (1-65535, not 80: browsers leave `:80` out, and the port is part
    /// of every check). `extraNames`: host names (ASCII letters, digits, `-` and `.`, as
    /// punycode spells any name) the daemon is also reached by.
    package init(port: Int, extraNames: [String] = []) throws(ServeError) {
        guard (1...65535).contains(port), port != 80 else {
            throw ServeError(.badRequest, "port \(port) cannot be checked in Host headers: use another")
        }
        for name in extraNames {
            let b = Array(name.utf8)
            guard !b.isEmpty, b.count <= 253, b.first != UInt8(ascii: "."), b.last != UInt8(ascii: "."),
                b.allSatisfy({
                    ($0 >= 0x30 && $0 <= 0x39) || ($0 | 0x20 >= 0x61 && $0 | 0x20 <= 0x7A) || $0 == 0x2D || $0 == 0x2E
                })
            else { throw ServeError(.badRequest, "'\(ServeError.shown(name))' is not a host name") }
        }
        self.port = port
        names = Set(["localhost", "127.0.0.1", "[::1]"] + extraNames.map { $0.lowercased() })
    }

    /// Refuses a request whose `Host` header is missing (400) or not an allowed name with this
    /// port (421).
    package func checkHost(_ host: String?) throws(ServeError) {
        guard let host else { throw ServeError(.badRequest, "a request without a Host header") }
        guard let (name, port) = Self.split(host), port == self.port, names.contains(name) else {
            throw ServeError(.misdirected, "this daemon does not answer to Host '\(ServeError.shown(host))'")
        }
    }

    /// Refuses a state-changing request whose `Origin` is not this daemon's own page
    /// (`http://NAME:PORT`). Without an Origin (the CLI, a script) the request must carry the
    /// token itself (`bearer`).
    package func checkOrigin(_ origin: String?, bearer: Bool) throws(ServeError) {
        guard let origin else {
            if bearer { return }
            throw ServeError(.forbidden, "a change without an Origin must carry the token")
        }
        let lower = origin.lowercased()
        guard lower.hasPrefix("http://"), let (name, port) = Self.split(String(lower.dropFirst(7))),
            port == self.port, names.contains(name)
        else { throw ServeError(.forbidden, "a change from another origin ('\(ServeError.shown(origin))') is refused") }
    }

    /// `name:port` split, the name lowercased; nil for anything else (no port, an empty name,
    /// a path, user info, bytes outside printable ASCII).
    static func split(_ text: String) -> (String, Int)? {
        let bytes = Array(text.utf8)
        guard !bytes.isEmpty, bytes.count <= 300, bytes.allSatisfy({ $0 > 0x20 && $0 < 0x7F }),
            !bytes.contains(UInt8(ascii: "/")), !bytes.contains(UInt8(ascii: "@")),
            let colon = bytes.lastIndex(of: UInt8(ascii: ":")), colon > 0
        else { return nil }
        let name = String(decoding: bytes[..<colon], as: UTF8.self).lowercased()
        let digits = bytes[(colon + 1)...]
        guard (1...5).contains(digits.count), let port = HTTPHeaders.decimal(String(decoding: digits, as: UTF8.self)),
            (1...65535).contains(port)
        else { return nil }
        if name.hasPrefix("[") != name.hasSuffix("]") { return nil }
        return (name, Int(port))
    }
}
