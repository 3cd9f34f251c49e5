import Foundation

/// Polls `condition` every 10 ms until it holds or `timeout` seconds pass; returns whether it
/// held. Sleeps with `Task.sleep`, so a waiting test never blocks one of the cooperative threads
/// the other tests need.
public func eventually(timeout: Double = 20, _ condition: () -> Bool) async -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if condition() { return true }
        try? await Task.sleep(nanoseconds: 10_000_000)
    }
    return condition()
}

/// ``eventually(timeout:_:)`` for a condition that awaits (a command run to see a state), polled
/// every 100 ms.
public func eventually(timeout: Double = 20, _ condition: () async -> Bool) async -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if await condition() { return true }
        try? await Task.sleep(nanoseconds: 100_000_000)
    }
    return await condition()
}
