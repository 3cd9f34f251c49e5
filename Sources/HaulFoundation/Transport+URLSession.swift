import Haul
import HaulCore

extension HaulConfiguration.Transport {
    /// Foundation's URLSession. It is in its own module because it links FoundationNetworking
    /// (and, on Linux, Foundation with its ICU data), which `Haul` alone never loads. On Linux it
    /// lacks flow control and is slower (docs/transports.md).
    ///
    /// It takes no extra certificate authorities, no TLS choices (``HaulConfiguration/tls``),
    /// no HTTP version and no proxy settings, and its transfers cannot be paced (it reads the socket whatever its
    /// task is told): a transfer that asks for any of these fails with ``HaulError/Code/usage``
    /// rather than run without it.
    public static let urlSession = HaulConfiguration.Transport(
        name: "urlSession", cannotPace: "URLSession transfers cannot be paced",
        refuses: { configuration in
            if configuration.trustedCertificatesFile != nil {
                return
                    "trustedCertificatesFile needs the curl transport (URLSession cannot be given extra certificates)"
            }
            if configuration.tls != HaulConfiguration.TLS() {
                return "tls (insecure or pinned keys) needs the curl transport"
            }
            if configuration.proxy != .environment || configuration.noProxy != nil
                || configuration.proxyCredential != nil
            {
                return "proxy, noProxy and proxyCredential need the curl transport"
            }
            if configuration.httpVersion != .automatic {
                return "httpVersion needs the curl transport"
            }
            if (configuration.maxOverallBytesPerSecond ?? 0) > 0 {
                return "maxOverallBytesPerSecond needs the curl transport (URLSession transfers cannot be paced)"
            }
            return nil
        },
        make: { .success(URLSessionTransport()) }
    )
}
