import Foundation
import HaulCore

/// A fresh directory under the system temporary directory, removed by `remove()`, and in any
/// case when the process exits (set `HAUL_KEEP_TEST_DIRS=1` to keep them for a look).
///
/// Most of the tests that make one never call `remove()` (a struct has no deinit, and a class's
/// would run after its last use, which Swift may place before the test is done with the path),
/// so without the removal at exit /tmp would fill with leftover `haul-test-` directories.
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
        _ = Self.removedAtExit
        _ = Self.made.withLock { $0.insert(path) }
    }

    /// The directories made by this process and not removed yet.
    private static let made = Locked<Set<String>>([])

    /// Registers the removal at exit, once.
    private static let removedAtExit: Void = {
        if ProcessInfo.processInfo.environment["HAUL_KEEP_TEST_DIRS"] != "1" {
            atexit { TemporaryDirectory.removeAllMade() }
        }
    }()

    private static func removeAllMade() {
        for path in made.withLock({ $0 }) { try? FileManager.default.removeItem(atPath: path) }
    }

    /// `path/name`.
    public func file(_ name: String) -> String { path + "/" + name }

    /// Deletes the directory and everything in it.
    public func remove() {
        try? FileManager.default.removeItem(atPath: path)
        _ = Self.made.withLock { $0.remove(path) }
    }

    /// The names in the directory, sorted.
    public func contents() -> [String] { ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted() }
}

/// Stops the server and removes the directories: one call for a test's `defer`.
public func cleanUp(_ server: TestServer, _ directories: TemporaryDirectory...) {
    server.shutdown()
    for directory in directories { directory.remove() }
}
