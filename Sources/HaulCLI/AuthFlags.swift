import Haul

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The credential flags `get` and `upload` share, in curl's spelling.
enum AuthFlags {
    static let options: [Arguments.Option] = [
        .init("-u", "--user", value: true),
        .init("--netrc"),
        .init("--netrc-file", value: true),
    ]

    /// The lines of `--help` for these flags.
    static let help = """
          -u, --user USER:PASSWORD   Basic authentication for each URL's own host (not for
                                  another host after a redirect; never stored or printed)
              --netrc             credentials per host from ~/.netrc (redirects included)
              --netrc-file FILE   the same from FILE
        """

    /// `USER:PASSWORD` split at its first `:` (the password may hold more; the user name cannot,
    /// since Basic joins the two with one); nil without a `:`.
    static func credential(_ text: String) -> HaulConfiguration.Credential? {
        guard let colon = text.utf8.firstIndex(of: UInt8(ascii: ":")) else { return nil }
        return HaulConfiguration.Credential(
            user: String(decoding: text.utf8[..<colon], as: UTF8.self),
            password: String(decoding: text.utf8[text.utf8.index(after: colon)...], as: UTF8.self))
    }

    /// Sets `c`'s credential and netrc file from the flags.
    static func apply(_ v: [String: [String]], to c: inout HaulConfiguration) throws(UsageError) {
        if let user = v.last("--user") {
            guard let credential = credential(user) else {
                throw UsageError("-u expects USER:PASSWORD (haul does not ask for a password)")
            }
            guard !credential.user.isEmpty else { throw UsageError("-u expects USER:PASSWORD, with a user name") }
            c.credential = credential
            if let problem = c.settingsProblem { throw UsageError("-u: \(problem)") }
        }
        if v.flag("--netrc") && v.flag("--netrc-file") { throw UsageError("use either --netrc or --netrc-file") }
        if let file = v.last("--netrc-file") {
            c.netrcFile = file
        } else if v.flag("--netrc") {
            // A missing ~/.netrc is no error (curl's way); an unreadable one is.
            let home =
                ProcessInfo.processInfo.environment["HOME"] ?? FileManager.default.homeDirectoryForCurrentUser.path
            let file = home + "/.netrc"
            if FileManager.default.fileExists(atPath: file) { c.netrcFile = file }
        }
        if let file = c.netrcFile, let problem = HaulConfiguration.netrcProblem(file) {
            throw UsageError(problem)
        }
    }
}
