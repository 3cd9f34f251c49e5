#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The XDG base directories haul keeps things in (XDG Base Directory Specification): the
/// variable's value when it is an absolute path, else its default under the home directory,
/// which is `$HOME` when absolute, else this user's in the password database. Nil without a
/// home: never a shared directory such as /tmp, where another user could make the path first.
package enum XDGDirectory: Sendable {
    /// `$XDG_STATE_HOME`, default `~/.local/state`: what outlives a run (validators, lists).
    case state
    /// `$XDG_CACHE_HOME`, default `~/.cache`.
    case cache

    package func path(_ environment: Environment = .process) -> String? {
        let (variable, fallback) =
            switch self {
            case .state: ("XDG_STATE_HOME", "/.local/state")
            case .cache: ("XDG_CACHE_HOME", "/.cache")
            }
        if let value = environment[variable], value.hasPrefix("/") { return value }
        return Self.home(environment).map { $0 + fallback }
    }

    /// `$HOME` when absolute, else the password database's.
    package static func home(_ environment: Environment = .process) -> String? {
        if let home = environment["HOME"], home.hasPrefix("/") { return home }
        return Sys.passwordHome()
    }
}
