/// How many items are in each state. A dictionary keyed by the state hashed the state's raw
/// `String` (RawRepresentable's hashing), made anew at each of the dozen look-ups a download's
/// start and end cost.
struct StateCounts: Sendable {
    private var queued = 0, running = 0, paused = 0, completed = 0, failed = 0, waitingForNetwork = 0

    subscript(_ state: DownloadManager.Item.State) -> Int {
        get {
            switch state {
            case .queued: queued
            case .running: running
            case .paused: paused
            case .completed: completed
            case .failed: failed
            case .waitingForNetwork: waitingForNetwork
            }
        }
        set {
            switch state {
            case .queued: queued = newValue
            case .running: running = newValue
            case .paused: paused = newValue
            case .completed: completed = newValue
            case .failed: failed = newValue
            case .waitingForNetwork: waitingForNetwork = newValue
            }
        }
    }
}
