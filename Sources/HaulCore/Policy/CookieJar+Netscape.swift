/// The Netscape cookie file, as curl (`-b`/`-c`) and wget (`--load-cookies`/`--save-cookies`)
/// read and write it: one cookie per line, seven fields separated by tabs (domain, subdomains
/// TRUE/FALSE, path, secure TRUE/FALSE, expiry in seconds since 1970 with 0 for a session
/// cookie, name, value); `#HttpOnly_` before the domain marks an HttpOnly cookie; other lines
/// starting with `#`, and blank ones, are comments.
extension CookieJar {
    /// Adds the cookies of a Netscape cookie file; lines that are not cookies, and expired
    /// cookies, are skipped (as curl does). Returns how many were added.
    @discardableResult
    package func load(netscape bytes: [UInt8], now: Int64 = CookieJar.now()) -> Int {
        var added = 0
        for rawLine in bytes.split(separator: 0x0A, omittingEmptySubsequences: true) {
            var line = rawLine
            if line.last == 0x0D { line = line.dropLast() }
            var httpOnly = false
            let prefix = Array("#HttpOnly_".utf8)
            if line.starts(with: prefix) {
                httpOnly = true
                line = line.dropFirst(prefix.count)
            } else if line.first == 0x23 {
                continue
            }
            let fields = line.split(separator: 0x09, omittingEmptySubsequences: false)
            // A cookie with an empty value has six fields in curl's older files.
            guard fields.count == 7 || fields.count == 6 else { continue }
            func text(_ i: Int) -> String { i < fields.count ? String(decoding: fields[i], as: UTF8.self) : "" }
            var domain = text(0).lowercased()
            let subdomains = text(1).uppercased() == "TRUE"
            if domain.hasPrefix(".") { domain.removeFirst() }
            let name = text(5)
            guard !domain.isEmpty, !name.isEmpty, text(2).hasPrefix("/"),
                !(Array(name.utf8) + Array(text(6).utf8)).contains(where: { $0 < 0x20 || $0 == 0x7F }),
                let expiry = HTTPHeaders.decimal(text(4)) ?? (text(4) == "-1" ? 0 : nil)
            else { continue }
            if expiry != 0 && expiry <= now { continue }
            let cookie = StoredCookie(
                name: name, value: text(6), domain: domain, hostOnly: !subdomains || Self.isIPAddress(domain),
                path: text(2), secure: text(3).uppercased() == "TRUE", httpOnly: httpOnly,
                expires: expiry == 0 ? nil : expiry)
            guard cookie.problem == nil else { continue }
            add(cookie, now: now)
            added += 1
        }
        return added
    }

    /// The cookies not expired at `now` as a Netscape cookie file (session cookies with expiry 0,
    /// as curl writes them).
    package func netscapeFile(now: Int64 = CookieJar.now()) -> String {
        var text = "# Netscape HTTP Cookie File\n# Written by haul; one cookie per line, fields separated by tabs.\n\n"
        for c in all(now: now) {
            let domain = (c.httpOnly ? "#HttpOnly_" : "") + (c.hostOnly ? "" : ".") + c.domain
            let fields = [
                domain, c.hostOnly ? "FALSE" : "TRUE", c.path, c.secure ? "TRUE" : "FALSE", String(c.expires ?? 0),
                c.name, c.value,
            ]
            text += fields.joined(separator: "\t") + "\n"
        }
        return text
    }
}
