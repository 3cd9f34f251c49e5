#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// How a transfer's connection is made: whom it trusts, which HTTP it speaks and which proxy it
/// goes through. The same for every request of a session, and for every hop of a redirect chain.
package struct ConnectionSettings: Sendable, Equatable {
    /// Which HTTP version to ask for.
    package enum HTTPVersion: Sendable, Equatable {
        /// HTTP/2 over TLS where the server offers it (ALPN), HTTP/1.1 otherwise (curl's default).
        case automatic
        /// HTTP/1.1 only (no ALPN offer of h2).
        case http1_1
        /// HTTP/2: over TLS by ALPN, over cleartext by an `Upgrade: h2c` the server may ignore.
        case http2
    }

    /// Which proxy the requests go through.
    package enum Proxy: Sendable, Equatable {
        /// The environment's, read by libcurl as curl reads it (`http_proxy`, `https_proxy`,
        /// `HTTPS_PROXY`, `all_proxy`, `ALL_PROXY`, `no_proxy`, `NO_PROXY`; not `HTTP_PROXY`).
        case environment
        /// None, whatever the environment says.
        case none
        /// This one (`http://`, `https://`, `socks4://`, `socks4a://`, `socks5://`, `socks5h://`),
        /// credentials in it or not.
        case url(String)
    }

    package var proxy: Proxy = .environment
    /// Hosts reached without the proxy (curl's `--noproxy`: names and domains, comma-separated,
    /// `*` for all); nil: the environment's `no_proxy`.
    package var noProxy: String?
    /// The proxy's user name and password, when not in its URL.
    package var proxyCredential: BasicCredential?
    /// Extra CA bundle to trust (PEM), on top of the system's.
    package var caFile: String?
    /// Whether the certificate chain and host name are checked. False only when asked for by name
    /// (`--insecure`); a pin is still checked then.
    package var verifiesCertificate = true
    /// `sha256//BASE64` hashes of acceptable server public keys (SubjectPublicKeyInfo, DER); empty
    /// for no pinning. Checked by ``validPin(_:)`` before they get here.
    package var pinnedPublicKeys: [String] = []
    package var httpVersion: HTTPVersion = .automatic

    package init(caFile: String? = nil) { self.caFile = caFile }

    /// `message` without the proxy's password where libcurl quotes the proxy's URL (some of its
    /// messages do): `user:password@` becomes `user:***@`, percent-encoded or not. Only that
    /// form is replaced: a short password replaced wherever it occurs would mangle the message
    /// (and show the password by what changed).
    package func scrubbed(_ message: String) -> String {
        guard case .url(let proxy) = proxy, let url = URL(string: proxy), let user = url.user(percentEncoded: true),
            let password = url.password(percentEncoded: true), !password.isEmpty
        else { return message }
        let decoded = (url.user(percentEncoded: false) ?? user, url.password(percentEncoded: false) ?? password)
        var out = message
        for (u, p) in [(user, password), decoded] { out = out.replacing("\(u):\(p)@", with: "\(u):***@") }
        return out
    }

    /// The pins as curl's `CURLOPT_PINNEDPUBLICKEY` takes them, or nil for none. Only valid ones
    /// (``validPin(_:)``) get there; with pins but none valid, one that no key has, so that
    /// nothing is accepted.
    package var curlPins: String? {
        guard !pinnedPublicKeys.isEmpty else { return nil }
        let valid = pinnedPublicKeys.compactMap(Self.validPin)
        return valid.isEmpty ? "sha256//" + String(repeating: "A", count: 43) + "=" : valid.joined(separator: ";")
    }

    /// `pin` when it is `sha256//` and the canonical base64 of 32 bytes (curl's form, which curl
    /// compares as text), else nil: nothing else reaches curl (no `;`, which separates pins, and
    /// no file name, which curl would open).
    package static func validPin(_ pin: String) -> String? {
        let prefix = "sha256//"
        guard pin.utf8.starts(with: prefix.utf8) else { return nil }
        let encoded = String(decoding: pin.utf8.dropFirst(prefix.utf8.count), as: UTF8.self)
        guard let hash = Data(base64Encoded: encoded), hash.count == 32, hash.base64EncodedString() == encoded else {
            return nil
        }
        return pin
    }
}
