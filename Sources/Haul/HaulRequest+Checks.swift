import HaulCore
#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

extension HaulRequest {
    /// `url` as haul writes it in records and messages: without a user name and password.
    public static func redacted(_ url: URL) -> String { ResumeRecord.redacted(url) }

    /// Refuses a header that cannot be sent as given: its name must be an RFC 9110 token, its
    /// value free of CR, LF and NUL (which would smuggle another header or request).
    /// - Throws: ``HaulError/Code/usage``, naming the fault.
    public static func checkHeader(name: String, value: String) throws(HaulError) {
        if let problem = HTTPHeaders.problem(name: name, value: value) { throw HaulError(.usage, problem) }
    }
}
