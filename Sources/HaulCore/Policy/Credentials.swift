#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A user name and password for HTTP Basic authentication (RFC 7617), as bytes: a netrc file's
/// may not be UTF-8, and they are sent as they are, base64-encoded (which no byte can break out
/// of).
package struct BasicCredential: Sendable, Equatable {
    package var user: [UInt8]
    package var password: [UInt8]

    package init(user: [UInt8], password: [UInt8]) {
        self.user = user
        self.password = password
    }

    package init(user: String, password: String) { self.init(user: Array(user.utf8), password: Array(password.utf8)) }

    /// Why these cannot be sent: a `:` in the user name (Basic joins the two with one). Nil
    /// when they can.
    package var problem: String? {
        user.contains(0x3A) ? "a user name for Basic authentication cannot contain ':'" : nil
    }

    /// The `Authorization` value: `Basic` and the base64 of `user:password`.
    package var authorization: String { "Basic " + Data(user + [0x3A] + password).base64EncodedString() }
}

/// The `machine`/`login`/`password` entries of a netrc file (netrc(5), as curl reads it):
/// credentials per host name, for whichever host a request goes to, redirects included.
package struct Netrc: Sendable, Equatable {
    package struct Entry: Sendable, Equatable {
        /// The host name, lower-cased; nil for `default`.
        package var machine: String?
        package var login: [UInt8]?
        package var password: [UInt8]?
    }

    package private(set) var entries: [Entry] = []

    /// The credential for `host`: the first `machine` of that name with a login (ASCII case
    /// ignored, the port not part of it, as with curl), else `default`'s, wherever it is in the
    /// file; only an entry of `user`'s login when a user is given (a URL's). A password missing
    /// is empty.
    package func credential(forHost host: String, user: [UInt8]? = nil) -> BasicCredential? {
        let host = host.lowercased()
        func usable(_ e: Entry) -> Bool { e.login != nil && (user == nil || e.login == user) }
        let entry =
            entries.first { $0.machine == host && usable($0) } ?? entries.first { $0.machine == nil && usable($0) }
        guard let entry, let login = entry.login else { return nil }
        return BasicCredential(user: login, password: entry.password ?? [])
    }

    /// Adds the credential for `url`'s host to `headers`, unless the request has one already (a
    /// header, or a user name and password in the URL, which curl sends). A URL with a user
    /// name and no password gets that user's password from the file, as with curl.
    package func authorize(_ headers: inout HTTPHeaders, for url: URL) {
        guard !headers.contains("Authorization"), let host = url.host else { return }
        let user = url.user(percentEncoded: false).map { Array($0.utf8) }
        if user != nil, !(url.password(percentEncoded: false) ?? "").isEmpty { return }
        guard let credential = credential(forHost: host, user: user), credential.problem == nil else { return }
        headers.add("Authorization", credential.authorization)
    }

    /// Reads and parses the netrc file at `path` (a regular file of at most 1 MiB); nil when
    /// `optional` and there is none.
    package static func read(_ path: String, optional: Bool) throws(HaulError) -> Netrc? {
        let bytes: [UInt8]?
        do throws(Errno) { bytes = try Sys.readSmallFile(path) } catch {
            throw HaulError(.usage, "cannot read netrc file \(path): \(error)")
        }
        guard let bytes else {
            if optional, (try? Sys.status(path)) == .some(nil) { return nil }
            let exists = (try? Sys.status(path)) != .some(nil)
            throw HaulError(.usage, "cannot read netrc file \(path): \(exists ? "not a regular file" : "no such file")")
        }
        return try parse(bytes, name: path)
    }

    /// Parses a netrc file's bytes. Tokens are separated by spaces, tabs and line breaks, may be
    /// double-quoted (with `\"`, `\\`, `\n`, `\r`, `\t` inside, as curl 7.84 and later take them);
    /// a `#` starting a token comments out the rest of its line; a `macdef` runs to the next
    /// empty line; `account` and its value are skipped. Throws ``HaulError/Code/usage`` naming
    /// the line of a token with no value, an unterminated quote, or a NUL.
    package static func parse(_ bytes: [UInt8], name: String) throws(HaulError) -> Netrc {
        var tokens = Tokens(bytes: bytes, name: name)
        var netrc = Netrc()
        func value(after keyword: String) throws(HaulError) -> [UInt8] {
            guard let next = try tokens.next() else { throw tokens.error("'\(keyword)' has no value", atToken: true) }
            return next
        }
        while let word = try tokens.next() {
            // Keywords in any case, as curl reads them.
            let token = String(decoding: word, as: UTF8.self).lowercased()
            switch token {
            case "machine":
                netrc.entries.append(
                    Entry(machine: String(decoding: try value(after: token), as: UTF8.self).lowercased()))
            case "default": netrc.entries.append(Entry(machine: nil))
            case "login", "password", "account":
                let v = try value(after: token)
                guard !netrc.entries.isEmpty else {
                    throw tokens.error("'\(token)' before any 'machine'", atToken: true)
                }
                if token == "login" { netrc.entries[netrc.entries.count - 1].login = v }
                if token == "password" { netrc.entries[netrc.entries.count - 1].password = v }
            case "macdef":
                _ = try value(after: token)
                tokens.skipMacro()
            default: break  // what curl skips too (an unknown word)
            }
        }
        return netrc
    }

    /// The tokens of a netrc file, with the line each is on.
    private struct Tokens {
        let bytes: [UInt8]
        let name: String
        var i = 0
        var line = 1
        /// The line the last token began on.
        var tokenLine = 1

        init(bytes: [UInt8], name: String) {
            self.bytes = bytes
            self.name = name
        }

        /// A usage error naming the file and the current line (or the last token's).
        func error(_ what: String, atToken: Bool = false) -> HaulError {
            HaulError(.usage, "netrc file \(name), line \(atToken ? tokenLine : line): \(what)")
        }

        mutating func next() throws(HaulError) -> [UInt8]? {
            while i < bytes.count {
                let b = bytes[i]
                if b == 0x0A {
                    line += 1
                    i += 1
                } else if b == 0x20 || b == 0x09 || b == 0x0D || b == 0x0C {
                    i += 1
                } else if b == 0x23 {  // '#': the rest of the line
                    while i < bytes.count && bytes[i] != 0x0A { i += 1 }
                } else {
                    break
                }
            }
            guard i < bytes.count else { return nil }
            tokenLine = line
            var out: [UInt8] = []
            if bytes[i] == 0x22 {
                i += 1
                while true {
                    guard i < bytes.count, bytes[i] != 0x0A else { throw error("a quoted word does not end") }
                    var b = bytes[i]
                    i += 1
                    if b == 0x22 { break }
                    if b == 0x5C, i < bytes.count {
                        switch bytes[i] {
                        case 0x6E: b = 0x0A
                        case 0x72: b = 0x0D
                        case 0x74: b = 0x09
                        default: b = bytes[i]
                        }
                        i += 1
                    }
                    out.append(b)
                }
            } else {
                while i < bytes.count, ![0x20, 0x09, 0x0A, 0x0D, 0x0C].contains(bytes[i]) {
                    out.append(bytes[i])
                    i += 1
                }
            }
            guard !out.contains(0) else { throw error("a NUL byte") }
            return out
        }

        /// Past a `macdef`'s body: the lines after its name, up to an empty one.
        mutating func skipMacro() {
            while i < bytes.count && bytes[i] != 0x0A { i += 1 }
            while i < bytes.count {
                // At a line's '\n': the body ends where the next line is empty.
                line += 1
                i += 1
                if i >= bytes.count || bytes[i] == 0x0A
                    || (bytes[i] == 0x0D && i + 1 < bytes.count && bytes[i + 1] == 0x0A)
                {
                    return
                }
                while i < bytes.count && bytes[i] != 0x0A { i += 1 }
            }
        }
    }
}
