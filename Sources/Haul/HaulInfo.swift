import HaulCore

/// Version information.
public enum HaulInfo {
    /// Haul's version.
    public static var version: String { HaulVersion.string }
    /// The libcurl that the default transport loaded (or why it could not).
    public static var transportDescription: String {
        switch CurlTransport.shared {
        case .success: return CurlTransport.version
        case .failure(let error): return "libcurl unavailable: \(error.message)"
        }
    }
}
