#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Environment variables, read one name at a time: the process's own (``process``, `getenv`,
/// so a variable set after start is seen) or a table (tests, a session's overrides).
///
/// Not `ProcessInfo.environment`, which builds a dictionary of every variable at each call, for
/// the handful of names a download reads (docs/startup.md).
package struct Environment: Sendable, ExpressibleByDictionaryLiteral {
    private let table: [String: String]?
    /// Names set (a value) or unset (nil) over the table or the process's.
    private let overrides: [String: String?]

    /// The process's environment.
    package static let process = Environment(table: nil, overrides: [:])

    private init(table: [String: String]?, overrides: [String: String?]) {
        self.table = table
        self.overrides = overrides
    }

    package init(_ table: [String: String]) { self.init(table: table, overrides: [:]) }

    package init(dictionaryLiteral elements: (String, String)...) {
        self.init(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }

    package subscript(_ name: String) -> String? {
        if let override = overrides[name] { return override }
        if let table { return table[name] }
        return getenv(name).map { String(cString: $0) }
    }

    /// This environment with `changes` applied: a value sets a name, nil unsets it.
    package func overriding(_ changes: [String: String?]) -> Environment {
        Environment(table: table, overrides: overrides.merging(changes) { _, new in new })
    }
}
