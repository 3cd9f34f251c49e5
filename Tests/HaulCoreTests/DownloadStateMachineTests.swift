import Foundation
import HaulTestTraits
import Testing

@testable import HaulCore

/// The single-connection download's decisions without a socket: when to checkpoint and note,
/// and what follows an attempt's end.
@Suite("Download decisions (no I/O)", .fewAtOnce)
struct DownloadStateMachineTests {
    let url = URL(string: "http://example.test/f.bin")!

    func machine(
        record: ResumeRecord? = nil, maxRetries: Int = 3, maxRestarts: Int = 2, priorFailures: Int = 0
    ) -> DownloadStateMachine {
        DownloadStateMachine(
            record: record, origin: url, retry: RetryPolicy(maxRetries: maxRetries, baseDelay: 1, maxDelay: 8),
            priorFailures: priorFailures, maxRestarts: maxRestarts, checkpointInterval: 1, notes: NotePolicy())
    }

    func dropped(reached: Int64, refused: Bool = false) -> DownloadStateMachine.AttemptEnd {
        var error = HaulError(.network, "connection reset")
        error.isTransient = true
        return .failed(error, transient: true, reached: reached, connectRefused: refused)
    }

    func retryNumber(_ next: DownloadStateMachine.Next) -> Int? {
        if case .retry(let attempt, _, _) = next { return attempt }
        return nil
    }

    @Test func failuresWithoutProgressRunOutAfterTheRetries() {
        var m = machine()
        m.attemptStarting(at: 0)
        var numbers: [Int?] = []
        for _ in 1...3 { numbers.append(retryNumber(m.attemptEnded(dropped(reached: 0), received: true))) }
        #expect(numbers == [1, 2, 3])
        guard case .fail(let error) = m.attemptEnded(dropped(reached: 0), received: true) else {
            Issue.record("a fourth failure without progress was retried")
            return
        }
        #expect(error.code == .network)
    }

    @Test func theDelayIsTheBackoffOrTheServersRetryAfter() {
        var m = machine()
        m.attemptStarting(at: 0)
        guard case .retry(_, let delay, _) = m.attemptEnded(dropped(reached: 0), received: true) else {
            Issue.record("not retried")
            return
        }
        #expect(delay >= 0.5 && delay <= 1, "the first backoff is 1 s with equal jitter: \(delay)")
        var busy = HaulError(.httpStatus, "HTTP 503", httpStatus: 503, retryAfter: 7)
        busy.isTransient = true
        let next = m.attemptEnded(.failed(busy, transient: true, reached: 0, connectRefused: false), received: false)
        #expect(next == .retry(attempt: 2, delay: 7, error: busy))
    }

    /// Only bytes past the furthest the partial held refill the budget: an attempt that started
    /// over (a 200 to its Range) and failed as early made no progress.
    @Test func onlyBytesPastTheFurthestRefillTheBudget() {
        var m = machine(maxRetries: 2)
        m.attemptStarting(at: 0)
        #expect(retryNumber(m.attemptEnded(dropped(reached: 1 << 20), received: true)) == 1)
        #expect(retryNumber(m.attemptEnded(dropped(reached: 1 << 20), received: true)) == 2, "no new bytes")
        #expect(retryNumber(m.attemptEnded(dropped(reached: 2 << 20), received: true)) == 1, "1 MiB more")
        #expect(retryNumber(m.attemptEnded(dropped(reached: (2 << 20) + 1000), received: true)) == 2, "under 64 KiB")
    }

    @Test func aRefusedConnectionBeforeAnyByteIsFinalAndAfterBytesIsRetried() {
        var fresh = machine()
        fresh.attemptStarting(at: 0)
        guard case .fail = fresh.attemptEnded(dropped(reached: 0, refused: true), received: false) else {
            Issue.record("nothing listens there: not worth retrying")
            return
        }
        var later = machine()
        later.attemptStarting(at: 0)
        #expect(retryNumber(later.attemptEnded(dropped(reached: 5000), received: true)) == 1)
        #expect(retryNumber(later.attemptEnded(dropped(reached: 5000, refused: true), received: false)) == 2)
    }

    @Test func aPermanentFailureIsNotRetried() {
        var m = machine()
        let gone = HaulError(.httpStatus, "HTTP 404", httpStatus: 404)
        let next = m.attemptEnded(.failed(gone, transient: false, reached: 0, connectRefused: false), received: false)
        #expect(next == .fail(gone))
    }

    @Test func restartsForgetTheRecordAndEndAfterTheLimit() {
        let record = ResumeRecord(url: url.absoluteString, etag: "\"a\"", totalLength: 100, ranges: [ByteRange(0, 50)])
        var m = machine(record: record, maxRestarts: 2)
        #expect(m.resume.resumeOffset == 50)
        #expect(
            m.attemptEnded(.restart(reason: "another version"), received: true) == .restart(reason: "another version"))
        #expect(m.resume.record == nil && m.resume.resumeOffset == 0)
        #expect(m.attemptEnded(.restart(reason: "again"), received: true) == .restart(reason: "again"))
        guard case .fail(let error) = m.attemptEnded(.restart(reason: "and again"), received: true) else {
            Issue.record("a third restart was allowed")
            return
        }
        #expect(error.code == .serverChangedFile && error.message.contains("gave up after 3 restarts"))
    }

    /// A checkpoint once a second; between them a note once both 0.15 s and 256 KiB have passed.
    @Test func writesAreCheckpointedEachSecondAndNotedBetween() {
        var m = machine()
        m.attemptStarting(at: 10)
        #expect(m.wrote(total: 100 << 10, at: 10.2) == .nothing, "under 256 KiB")
        #expect(m.wrote(total: 300 << 10, at: 10.1) == .nothing, "under 0.15 s")
        #expect(m.wrote(total: 300 << 10, at: 10.2) == .note)
        #expect(m.wrote(total: 400 << 10, at: 10.5) == .nothing, "under 256 KiB since the note")
        #expect(m.wrote(total: 600 << 10, at: 11.0) == .checkpoint)
        #expect(m.wrote(total: 600 << 10, at: 11.1) == .checkpoint, "due until one begins")
        m.checkpointed(at: 11.1)
        #expect(m.wrote(total: 700 << 10, at: 11.5) == .note, "a checkpoint leaves the notes' clock alone")
        #expect(m.wrote(total: 800 << 10, at: 11.9) == .nothing)
        #expect(m.wrote(total: 2 << 20, at: 12.2) == .checkpoint)
    }

    @Test func answersGoThroughTheResumeRules() {
        let record = ResumeRecord(url: url.absoluteString, etag: "\"a\"", totalLength: 100, ranges: [ByteRange(0, 50)])
        let m = machine(record: record)
        let other = HTTPHeaders([("Content-Range", "bytes 50-99/100"), ("ETag", "\"b\"")])
        guard case .restart = m.resume.responseReceived(status: 206, headers: other, url: url) else {
            Issue.record("another version's range was taken")
            return
        }
        let same = HTTPHeaders([("Content-Range", "bytes 50-99/100"), ("ETag", "\"a\"")])
        guard case .write(let offset, false, _) = m.resume.responseReceived(status: 206, headers: same, url: url)
        else {
            Issue.record("the same version's range was refused")
            return
        }
        #expect(offset == 50)
    }
}
