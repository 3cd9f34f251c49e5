#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// One download over one connection, as events in and actions out; the engine
/// (``FileDownloader``) does the requests, the writes and the waits. Pure: no I/O, no clock of
/// its own (times come with the events), tested without sockets.
///
/// - An answer's head goes to ``ResumeStateMachine``'s rules (``resume``): write from an
///   offset, follow a redirect, restart, retry, fail.
/// - Bytes written (``wrote(total:at:)``) say when the partial is checkpointed (synced, once a
///   ``checkpointInterval``) and when the bytes between are noted (``NotePolicy``).
/// - An attempt that ended without the file in place (``attemptEnded(_:received:)``) says what
///   comes next: ask again, retry after a delay (one ``RetryBudget``, credited only with bytes past the furthest the
///   partial held), restart from zero (at most ``maxRestarts`` times), or fail.
package struct DownloadStateMachine: Sendable {
    /// The head rules and the record of what the partial holds.
    package var resume: ResumeStateMachine
    private var budget: RetryBudget
    private let maxRestarts: Int
    private let checkpointInterval: Double
    private let notes: NotePolicy
    /// Restarts so far.
    private var restarts = 0
    /// Whether any attempt received a byte (a refused connection before any byte is final).
    private var everReceived = false
    /// The most bytes the partial has held: only an attempt that gets past it made progress (one
    /// that started over, on a 200 to a Range, and failed as early did not), and none gets
    /// credit for the bytes it resumes past.
    private var furthest: Int64 = 0
    private var lastCheckpoint: Double = 0
    private var lastNote: (at: Double, bytes: Int64) = (0, 0)

    package init(
        record: ResumeRecord?, origin: URL, retry: RetryPolicy, priorFailures: Int = 0, maxRestarts: Int,
        checkpointInterval: Double, notes: NotePolicy
    ) {
        resume = ResumeStateMachine(record: record, origin: origin)
        budget = RetryBudget(retry, failures: priorFailures)
        self.maxRestarts = maxRestarts
        self.checkpointInterval = checkpointInterval
        self.notes = notes
    }

    // MARK: - Events

    /// An attempt starts at `now`: its checkpoint and note clocks start, and the bytes it
    /// resumes past are no progress of its own.
    package mutating func attemptStarting(at now: Double) {
        furthest = max(furthest, resume.resumeOffset)
        lastCheckpoint = now
        lastNote = (now, 0)
    }

    /// What to do after a write, the partial now holding `total` bytes.
    package enum AfterWrite: Equatable, Sendable {
        case nothing
        /// Sync the partial and replace the record (then ``checkpointed(at:)``).
        case checkpoint
        /// Note the written bytes in the record, without a sync.
        case note
    }

    /// The partial holds `total` bytes at `now`.
    package mutating func wrote(total: Int64, at now: Double) -> AfterWrite {
        if now - lastCheckpoint >= checkpointInterval { return .checkpoint }
        guard notes.isDue(bytesSince: total - lastNote.bytes, secondsSince: now - lastNote.at) else { return .nothing }
        lastNote = (now, total)
        return .note
    }

    /// A checkpoint began at `now` (the next is due a ``checkpointInterval`` later).
    package mutating func checkpointed(at now: Double) { lastCheckpoint = now }

    /// How an attempt ended, as the engine saw it.
    package enum AttemptEnd: Equatable, Sendable {
        /// It failed; `transient` when another try may do better. `reached`: the bytes the
        /// partial held at the end; `connectRefused`: no connection was made.
        case failed(HaulError, transient: Bool, reached: Int64, connectRefused: Bool)
        /// The answer named a destination that holds a partial of this URL: ask again with Range.
        case askAgain
        /// The answer is of another version (or ignored the range): start from zero.
        case restart(reason: String)
    }

    /// What the engine does next.
    package enum Next: Equatable, Sendable {
        case askAgain
        /// Wait `delay` seconds, then try again (`attempt`: the retry's number).
        case retry(attempt: Int, delay: Double, error: HaulError)
        /// Discard the partial and ask from zero.
        case restart(reason: String)
        case fail(HaulError)
    }

    /// An attempt ended; `received`: whether it received any byte.
    package mutating func attemptEnded(_ end: AttemptEnd, received: Bool) -> Next {
        everReceived = everReceived || received
        switch end {
        case .askAgain:
            return .askAgain
        case .restart(let reason):
            resume.reset()
            furthest = 0  // a new version: its bytes are progress from its first
            restarts += 1
            guard restarts <= maxRestarts else {
                return .fail(HaulError(.serverChangedFile, "gave up after \(restarts) restarts: \(reason)"))
            }
            return .restart(reason: reason)
        case .failed(let error, let transient, let reached, let connectRefused):
            // A refused connection before any byte ever came is an answer: nothing listens there.
            if !transient || (error.code == .network && !everReceived && connectRefused) { return .fail(error) }
            if reached > furthest {
                budget.progressed(reached - furthest)
                furthest = reached
            }
            do throws(HaulError) {
                let (attempt, delay) = try budget.failed(error)
                return .retry(attempt: attempt, delay: delay, error: error)
            } catch {
                return .fail(error)
            }
        }
    }
}
