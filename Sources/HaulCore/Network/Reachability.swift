#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Host reachability before a download starts: resolve the host, then ask the kernel for a
/// route to each address (a UDP connect, which sends nothing). A host without one fails at
/// once with ``HaulError/Code/unreachableHost`` instead of a connect timeout and its retries.
package enum Reachability {
    /// nil when some address of `url`'s host has a route; else the error naming the cause.
    /// Skipped (nil) when a proxy variable applies, since curl then connects to the proxy.
    package static func check(
        _ url: URL, environment: Environment = .process
    ) -> HaulError? {
        guard let host = url.host, !host.isEmpty else { return nil }
        if proxyApplies(to: url, environment: environment) { return nil }
        let port = url.port ?? (url.scheme?.lowercased() == "https" ? 443 : 80)
        let addresses: [ResolvedAddress]
        do {
            addresses = try Sys.resolve(host, port: port)
        } catch {
            return HaulError(.unreachableHost, "unreachable host: cannot resolve \(host) (\(error.message))")
        }
        var failures: [String] = []
        for address in addresses {
            guard let error = Sys.routeError(to: address) else { return nil }
            failures.append("\(address.text): \(error)")
        }
        return HaulError(
            .unreachableHost, "unreachable host: no route to \(host) (\(failures.joined(separator: "; ")))")
    }

    /// Whether curl would go through a proxy for `url` (its environment variables).
    static func proxyApplies(to url: URL, environment: Environment) -> Bool {
        let scheme = url.scheme?.lowercased() ?? "http"
        let names = [scheme + "_proxy", scheme.uppercased() + "_PROXY", "all_proxy", "ALL_PROXY"]
        // curl ignores upper-case HTTP_PROXY (CGI safety); so does this.
        guard names.filter({ $0 != "HTTP_PROXY" }).contains(where: { environment[$0]?.isEmpty == false }) else {
            return false
        }
        // An empty variable is an unset one, as curl reads them.
        func variable(_ name: String) -> String? { environment[name].flatMap { $0.isEmpty ? nil : $0 } }
        let noProxy = (variable("no_proxy") ?? variable("NO_PROXY") ?? "").split(separator: ",").map {
            $0.trimmingASCIIWhitespace().lowercased()
        }
        let host = url.host?.lowercased() ?? ""
        return !noProxy.contains {
            $0 == "*" || host == $0 || ($0.hasPrefix(".") ? host.hasSuffix($0) : host.hasSuffix("." + $0))
        }
    }
}
