import HaulCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The resource timeout (``HaulConfiguration/Timeout/resource``, `--max-time`): the whole
/// transfer, retries included.
extension HaulSession {
    /// Runs `body`; once ``HaulConfiguration/Timeout/resource`` seconds have passed it is
    /// cancelled (a download keeps its partial) and the call fails with ``HaulError/Code/timeout``
    /// naming `what`. A cancel of the calling task still reads as a cancel.
    ///
    /// `lastFailure` names what went wrong before the time ran out (the last retried error), for
    /// the message.
    func withinResourceTimeout<T: Sendable>(
        _ what: @autoclosure () -> String, lastFailure: @escaping @Sendable () -> String? = { nil },
        _ body: @escaping @Sendable () async throws(HaulError) -> T
    ) async throws(HaulError) -> T {
        guard let limit = configuration.timeout.resource, limit > 0, limit.isFinite else { return try await body() }
        let stop = Locked(ResourceTimerStop.none)
        let work = Task { () async -> Result<T, HaulError> in
            do throws(HaulError) { return .success(try await body()) } catch { return .failure(error) }
        }
        let timer = Task {
            try? await Task.sleep(nanoseconds: Seconds.nanoseconds(limit))
            let first = stop.withLock { s -> Bool in
                guard s == .none, !Task.isCancelled else { return false }
                s = .timer
                return true
            }
            if first { work.cancel() }
        }
        let result = await withTaskCancellationHandler {
            await work.value
        } onCancel: {
            stop.withLock { if $0 == .none { $0 = .caller } }
            timer.cancel()
            work.cancel()
        }
        timer.cancel()
        switch result {
        case .success(let value): return value
        case .failure(let error) where error.code == .cancelled && stop.get() == .timer:
            let last = lastFailure().map { " (last failure: \($0))" } ?? ""
            throw HaulError(
                .timeout, "\(what()) did not finish within \(Seconds.text(limit)) s\(last)", path: error.path)
        case .failure(let error): throw error
        }
    }

    /// Who stopped a transfer under a resource timeout first: the timer, or the caller (a
    /// cancel, a task's suspend).
    fileprivate enum ResourceTimerStop { case none, timer, caller }
}
