#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Follows redirects for one request chain: counts hops, detects loops, allows only http(s),
/// and keeps credentials with their origin (`Authorization`, `Proxy-Authorization` and `Cookie`
/// are dropped when scheme, host or port change; URL user and password carry over only to the
/// same origin, as `curl -L` does). A netrc file's credentials are for each host by name: a hop
/// to another host gets that host's, if the file has any (curl's `--netrc`), except over plain
/// http once the chain has been on https (curl would send them there in the clear).
package struct RedirectChain: Sendable {
    package private(set) var current: URL
    package private(set) var headers: HTTPHeaders
    private let origin: URL
    private let maxRedirects: Int
    private let netrc: Netrc?
    /// Whether a hop so far was https (carried into a chain that goes on from where another
    /// one ended: a segmented download's ranges start at its probe's last hop).
    package private(set) var beenOnTLS = false
    private var visited: Set<String>
    private var hops = 0

    package init(url: URL, headers: HTTPHeaders, maxRedirects: Int, netrc: Netrc? = nil, beenOnTLS: Bool = false) {
        self.beenOnTLS = beenOnTLS
        current = url
        origin = url
        self.headers = headers
        self.maxRedirects = maxRedirects
        self.netrc = netrc
        visited = [url.absoluteString]
        addNetrcCredential()
    }

    private mutating func addNetrcCredential() {
        let onTLS = current.scheme?.lowercased() == "https"
        beenOnTLS = beenOnTLS || onTLS
        guard onTLS || !beenOnTLS else { return }
        netrc?.authorize(&headers, for: current)
    }

    /// Moves to `next`, or explains why not.
    package mutating func follow(to next: URL) throws(HaulError) {
        hops += 1
        guard hops <= maxRedirects else {
            throw HaulError(
                .tooManyRedirects, "more than \(maxRedirects) redirects from \(ResumeRecord.redacted(origin))")
        }
        guard visited.insert(next.absoluteString).inserted else {
            throw HaulError(.tooManyRedirects, "redirect loop at \(ResumeRecord.shown(next, origin: origin))")
        }
        guard ["http", "https"].contains(next.scheme?.lowercased() ?? "") else {
            throw HaulError(.invalidURL, "redirect to unsupported URL \(ResumeRecord.shown(next, origin: origin))")
        }
        var next = next
        if !Self.sameOrigin(current, next) {
            // Credentials are for the host the user named, never for where it points.
            for name in ["Authorization", "Proxy-Authorization", "Cookie"] { headers.remove(name) }
        } else if next.user == nil, current.user != nil,
            var components = URLComponents(url: next, resolvingAgainstBaseURL: false)
        {
            components.user = current.user(percentEncoded: false)
            components.password = current.password(percentEncoded: false)
            next = components.url ?? next
        }
        current = next
        addNetrcCredential()
    }

    /// Where an answer to a request for `url` redirects: its `Location` (relative to `url`) when
    /// the status is 301, 302, 303, 307 or 308; nil otherwise, or without a usable `Location`.
    package static func target(of response: TransportResponse, askedFor url: URL) -> URL? {
        guard [301, 302, 303, 307, 308].contains(response.status), let location = response.headers["Location"] else {
            return nil
        }
        return URL(string: location, relativeTo: url)?.absoluteURL
    }

    package static func sameOrigin(_ a: URL, _ b: URL) -> Bool {
        func port(_ u: URL) -> Int { u.port ?? (u.scheme?.lowercased() == "https" ? 443 : 80) }
        return a.scheme?.lowercased() == b.scheme?.lowercased() && a.host?.lowercased() == b.host?.lowercased()
            && port(a) == port(b)
    }
}
