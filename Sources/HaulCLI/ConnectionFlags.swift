import Haul

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The flags `get` and `upload` share for how a connection is made (trust, pins, HTTP version),
/// in curl's spelling. `-k` is not `--insecure` here: it is aria2's `--min-split-size`.
enum ConnectionFlags {
    static let options: [Arguments.Option] = [
        .init("--cacert", value: true),
        .init("--insecure"),
        .init("--pinnedpubkey", value: true),
        .init("--http1.1"),
        .init("--http2"),
        .init("--proxy", value: true),
        .init("--noproxy", value: true),
        .init("--proxy-user", value: true),
    ]

    /// The lines of `--help` for these flags.
    static let help = """
              --cacert FILE       trust these extra CA certificates (PEM)
              --insecure          do not verify the server's certificate or name (warned about
                                  on every run: anyone on the path can read and change what
                                  is sent and received); a --pinnedpubkey is still checked
              --pinnedpubkey sha256//BASE64[;sha256//BASE64...]   the server's public key must
                                  have one of these SHA-256 hashes (curl's form), else exit 7
              --http1.1           HTTP/1.1 only
              --http2             HTTP/2, also over plain http (an upgrade the server may
                                  ignore); over https HTTP/2 is the default where offered
              --proxy URL         use this proxy (http://, https://, socks4[a]://, socks5[h]://;
                                  '' for none); default: http_proxy, https_proxy, all_proxy
                                  and no_proxy from the environment, as curl reads them
              --noproxy HOSTS     reach these hosts (comma-separated, '*' for all) directly
              --proxy-user USER:PASSWORD   the proxy's credentials (also in its URL)
        """

    /// What `--insecure` prints on every run that uses it.
    static let insecureWarning =
        "--insecure: the server's certificate is not checked; anyone on the path can read and change what is sent and received"

    /// Sets `c`'s trust and HTTP version from the flags.
    static func apply(_ v: [String: [String]], to c: inout HaulConfiguration) throws(UsageError) {
        if let ca = v.last("--cacert") {
            guard FileManager.default.isReadableFile(atPath: ca) else { throw UsageError("cannot read --cacert \(ca)") }
            c.trustedCertificatesFile = ca
        }
        c.tls.verifiesCertificate = !v.flag("--insecure")
        // Repeated, the flags add up (curl keeps the last one): every pin given is accepted.
        for value in v["--pinnedpubkey"] ?? [] {
            c.tls.pinnedPublicKeys += value.split(separator: ";", omittingEmptySubsequences: false).map(String.init)
        }
        if let problem = c.settingsProblem { throw UsageError("--pinnedpubkey: \(problem)") }
        if let proxy = v.last("--proxy") {
            if proxy.isEmpty {
                c.proxy = .none
            } else {
                // curl's rule: no scheme is http://.
                let text = proxy.contains("://") ? proxy : "http://" + proxy
                guard let url = URL(string: text) else { throw UsageError("--proxy: not a URL") }
                c.proxy = .url(url)
            }
        }
        if let list = v.last("--noproxy") {
            c.noProxy = list.split(separator: ",", omittingEmptySubsequences: true).map {
                String($0).trimmingASCIISpaces()
            }
        }
        if let user = v.last("--proxy-user") {
            guard let credential = AuthFlags.credential(user), !credential.user.isEmpty else {
                throw UsageError("--proxy-user expects USER:PASSWORD")
            }
            c.proxyCredential = credential
        }
        if let problem = c.settingsProblem { throw UsageError(problem) }
        switch (v.flag("--http1.1"), v.flag("--http2")) {
        case (true, true): throw UsageError("use either --http1.1 or --http2")
        case (true, false): c.httpVersion = .http1_1
        case (false, true): c.httpVersion = .http2
        case (false, false): c.httpVersion = .automatic
        }
    }
}

extension String {
    /// Without leading and trailing spaces and tabs.
    fileprivate func trimmingASCIISpaces() -> String {
        let bytes = Array(utf8)
        guard let first = bytes.firstIndex(where: { $0 != 0x20 && $0 != 0x09 }) else { return "" }
        let last = bytes.lastIndex(where: { $0 != 0x20 && $0 != 0x09 })!
        return String(decoding: bytes[first...last], as: UTF8.self)
    }
}
