/// Names a process remembers one fact about (directories known to have no default ACL, to exist,
/// to refuse links), shared by its threads, at most `limit` of them: once full, a name not in it
/// is not added, and whoever asks looks again for itself.
package final class RememberedSet: Sendable {
    private let names = Locked<Set<String>>([])
    private let limit: Int

    package init(limit: Int = 512) { self.limit = limit }

    package func contains(_ name: String) -> Bool { names.withLock { $0.contains(name) } }

    /// Adds `name` unless `limit` names are kept already.
    package func insert(_ name: String) { names.withLock { if $0.count < limit { $0.insert(name) } } }
}
