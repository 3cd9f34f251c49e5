import Foundation

/// A fresh directory under the system temporary directory, removed by `remove()`.
public struct TemporaryDirectory: Sendable {
    /// Its path.
    public let path: String
    /// Its URL.
    public var url: URL { URL(fileURLWithPath: path) }

    /// Creates a new, empty directory.
    public init(_ prefix: String = "haul-test") throws {
        let template = NSTemporaryDirectory() + "\(prefix)-XXXXXX"
        var bytes = Array(template.utf8CString)
        guard let made = mkdtemp(&bytes) else { throw POSIXError(.EIO) }
        path = String(cString: made)
    }

    /// `path/name`.
    public func file(_ name: String) -> String { path + "/" + name }

    /// Deletes the directory and everything in it.
    public func remove() { try? FileManager.default.removeItem(atPath: path) }

    /// The names in the directory, sorted.
    public func contents() -> [String] { ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted() }
}

/// Stops the server and removes the directories: one call for a test's `defer`.
public func cleanUp(_ server: TestServer, _ directories: TemporaryDirectory...) {
    server.shutdown()
    for directory in directories { directory.remove() }
}
