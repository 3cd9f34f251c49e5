import Haul

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The cookie flags `get` and `upload` share, in curl's spelling (`-c` is `--continue` here,
/// as in wget, so the jar has only its long name).
enum CookieFlags {
    static let options: [Arguments.Option] = [
        .init("-b", "--cookie", value: true),
        .init("--cookie-jar", value: true),
    ]

    /// The lines of `--help` for these flags.
    static let help = """
          -b, --cookie FILE|NAME=VALUE   send the cookies of a Netscape cookie file (curl's and
                                  wget's; a missing FILE is none), or, with a '=' in it, this
                                  Cookie header (not sent to other hosts after a redirect)
              --cookie-jar FILE   write the run's cookies to FILE at its end (mode 0600);
                                  within a run a server's Set-Cookie is always sent back
        """

    /// Gives `c` a cookie jar with the `-b` file's cookies, or the `-b` header; the `--cookie-jar`
    /// file to write at the end.
    static func apply(_ v: [String: [String]], to c: inout HaulConfiguration) throws(UsageError) -> String? {
        let jar = HaulCookieJar()
        c.cookieJar = jar
        for value in v["--cookie"] ?? [] {
            // curl's rule: with a '=' it is the header's text, else a file's name.
            if value == "-" { throw UsageError("-b - (cookies from standard input) is not supported: name a file") }
            if value.utf8.contains(UInt8(ascii: "=")) {
                guard !value.utf8.contains(where: { $0 == 0x0D || $0 == 0x0A || $0 == 0 }) else {
                    throw UsageError("-b: a cookie cannot hold a line break or NUL")
                }
                let given = c.additionalHeaders["Cookie"].map { $0 + "; " } ?? ""
                c.additionalHeaders["Cookie"] = given + value
            } else if FileManager.default.fileExists(atPath: value) {
                do throws(HaulError) { try jar.read(netscapeFile: value) } catch {
                    throw UsageError("-b: \(error.message)")
                }
            }
        }
        let out = v.last("--cookie-jar")
        if out?.isEmpty == true { throw UsageError("--cookie-jar needs a file name") }
        if out == "-" { throw UsageError("--cookie-jar - (standard output) is not supported: name a file") }
        return out
    }

    /// Writes the run's cookies to `file`, if one was asked for; a failure is an error line and
    /// exit 5, unless the run had failed already (its code stays).
    static func save(
        _ configuration: HaulConfiguration, to file: String?, output: Output, after code: ExitCode
    )
        -> ExitCode
    {
        guard let file, let jar = configuration.cookieJar else { return code }
        do throws(HaulError) {
            try jar.write(toNetscapeFile: file)
            return code
        } catch {
            output.error(error.message)
            return code == .success ? .fileSystem : code
        }
    }
}
