import HaulCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A download you control: start, suspend, resume, cancel, or cancel keeping resume data.
///
/// Tasks start suspended, like `URLSessionTask`; call ``resume()``.
///
/// ```swift
/// let task = session.downloadTask(with: url, to: .file(dest))
/// Task { for await event in task.events { print(event) } }
/// task.resume()
/// task.suspend()          // the transfer stops; no bytes arrive
/// task.resume()           // continues with a Range request at the same offset
/// let result = try await task.finished()
/// ```
///
/// Suspending ends the transfer and keeps the partial file and its record (so a suspended task
/// costs no connection); resuming asks for the rest with `Range` + `If-Range`.
public final class DownloadTask: Sendable {
    /// Where a task is in its life.
    public enum State: Sendable, Equatable {
        /// Created or suspended: no transfer runs.
        case suspended
        /// Transferring (or waiting to retry).
        case running
        /// Cancelled, winding down.
        case canceling
        /// Finished: successfully, with an error, or cancelled (see ``DownloadTask/error``).
        case completed
    }

    private enum Stop { case suspend, cancel, cancelKeepingData }

    /// The file being written: the one asked for, or the one the start reported, whose path is
    /// read only when it is needed (a URL makes its path anew at each read, and most downloads
    /// never ask).
    private enum Written {
        case path(String)
        case started(URL)

        var path: String {
            switch self {
            case .path(let path): path
            case .started(let url): url.path
            }
        }
    }

    private struct Inner {
        var state = State.suspended
        var error: HaulError?
        var result: DownloadResult?
        var progress: TransferProgress?
        var destination: Written?
        var runner: Task<Void, Never>?
        var generation = 0
        var stop: Stop?
        /// `complete` has run (it runs once).
        var ended = false
        /// What the first ``cancelProducingResumeData()`` that kept bytes gave, for the calls
        /// after it.
        var resumeData: ResumeData?
        var subscribers: [Int: AsyncStream<DownloadEvent>.Continuation] = [:]
        var nextSubscriber = 0
        var handlers: [@Sendable (DownloadEvent) -> Void] = []
        var waiters: [CheckedContinuation<Result<DownloadResult, HaulError>, Never>] = []
    }

    private let session: HaulSession
    /// The URL being downloaded.
    public let url: URL
    private let destination: DownloadDestination
    private let options: DownloadOptions
    private let inner = Locked(Inner())

    init(session: HaulSession, url: URL, destination: DownloadDestination, options: DownloadOptions) {
        self.session = session
        self.url = url
        self.destination = destination
        self.options = options
        if case .file(let file) = destination {
            inner.withLock { $0.destination = .path(Sys.lexicallyNormalized(file.path)) }
        }
    }

    /// The current state.
    public var state: State { inner.withLock { $0.state } }
    /// The error the task completed with, if any (``HaulError/Code/cancelled`` after a cancel).
    public var error: HaulError? { inner.withLock { $0.error } }
    /// The latest progress, nil before the first bytes.
    public var progress: TransferProgress? { inner.withLock { $0.progress } }

    /// The result, once the task has completed (the manager's items report it).
    package var result: DownloadResult? { inner.withLock { $0.result } }

    /// Events from now on, as an `AsyncSequence` (each access is a new subscriber). The stream
    /// ends when the task completes.
    public var events: AsyncStream<DownloadEvent> {
        AsyncStream(bufferingPolicy: .bufferingNewest(1024)) { continuation in
            let (id, done) = inner.withLock { s -> (Int, Bool) in
                if s.state == .completed { return (0, true) }
                s.nextSubscriber += 1
                s.subscribers[s.nextSubscriber] = continuation
                return (s.nextSubscriber, false)
            }
            if done { return continuation.finish() }
            continuation.onTermination = { [weak self] _ in
                _ = self?.inner.withLock { $0.subscribers.removeValue(forKey: id) }
            }
        }
    }

    /// Calls `handler` with every event from now on, on a background thread.
    public func onEvent(_ handler: @escaping @Sendable (DownloadEvent) -> Void) {
        inner.withLock { $0.handlers.append(handler) }
    }

    /// Sends every event from now on to `delegate` (held weakly), on a background thread.
    public func setDelegate(_ delegate: any DownloadTaskDelegate) {
        onEvent { [weak delegate, unowned self] event in delegate?.downloadTask(self, didReceive: event) }
    }

    /// Starts or continues the transfer. Does nothing unless the task is suspended.
    public func resume() {
        inner.withLock { s in
            guard s.state == .suspended else { return }
            s.state = .running
            s.stop = nil
            s.generation += 1
            let previous = s.runner
            let generation = s.generation
            // Created under the lock, so a suspend() right after always finds this runner.
            s.runner = Task { [self] in
                await previous?.value  // never two transfers on one file
                await run(generation: generation)
            }
        }
    }

    /// Stops the transfer, keeping its bytes; ``resume()`` continues from them. A transfer whose
    /// last bytes had already arrived completes anyway (``events`` then reports `.suspended` and
    /// `.completed`).
    public func suspend() {
        let runner = inner.withLock { s -> Task<Void, Never>? in
            guard s.state == .running else { return nil }
            s.state = .suspended
            s.stop = .suspend
            return s.runner
        }
        runner?.cancel()
        if runner != nil { emit(.suspended) }
    }

    /// Moves a running or suspended task to `.canceling` with `stop`; returns its runner and the
    /// state it was in (a task in any other state is left as it is).
    private func beginCanceling(_ stop: Stop) -> (runner: Task<Void, Never>?, from: State, stop: Stop?) {
        inner.withLock { s in
            let from = s.state
            if from == .running || from == .suspended {
                s.state = .canceling
                s.stop = stop
            }
            return (s.runner, from, s.stop)
        }
    }

    /// Cancels the download and removes its partial file. ``finished()`` throws
    /// ``HaulError/Code/cancelled``, unless the last bytes had already arrived: then the task
    /// completes with its file.
    public func cancel() {
        let (runner, from, _) = beginCanceling(.cancel)
        switch from {
        case .running:
            runner?.cancel()
        case .suspended:
            Task { [self] in
                await runner?.value
                complete(.failure(HaulError(.cancelled, "cancelled")), stop: .cancel)
            }
        case .canceling, .completed:
            break  // already stopping or finished
        }
    }

    /// Cancels the download keeping its bytes, and returns what a later task needs to continue
    /// (nil when nothing was written yet, or the task had already completed another way). While
    /// another cancel is under way it waits for that one; it returns resume data only if that
    /// cancel keeps the bytes too. A task such a cancel ended gives every later call the resume
    /// data the first call gave: of two calls at once, the second may come after the first has
    /// ended the task.
    public func cancelProducingResumeData() async -> ResumeData? {
        let (runner, from, stop) = beginCanceling(.cancelKeepingData)
        switch from {
        case .running:
            runner?.cancel()
            await runner?.value
        case .suspended:
            await runner?.value
            complete(.failure(HaulError(.cancelled, "cancelled")), stop: .cancelKeepingData)
        case .canceling:
            await runner?.value
            guard stop == .cancelKeepingData else { return nil }
        case .completed:
            // Not a task whose file was in place first (a stop cannot undo that).
            let kept = inner.withLock { s in (s.result == nil, s.resumeData) }
            guard stop == .cancelKeepingData, kept.0 else { return nil }
            if let data = kept.1 { return data }
        }
        guard let destination = inner.withLock({ $0.destination?.path }),
            let record = DownloadStore.resumeRecord(of: url, at: destination),
            record.contiguousBytes > 0
        else { return nil }
        let data = ResumeData(record: record, destination: destination)
        return inner.withLock { s in
            if s.resumeData == nil { s.resumeData = data }
            return s.resumeData
        }
    }

    /// The completion-handler form of ``cancelProducingResumeData()``.
    public func cancel(producingResumeData completionHandler: @escaping @Sendable (ResumeData?) -> Void) {
        Task { completionHandler(await cancelProducingResumeData()) }
    }

    /// Waits for the task to complete.
    /// - Returns: The finished file.
    /// - Throws: The ``HaulError`` it completed with.
    public func finished() async throws(HaulError) -> DownloadResult {
        let result = await withCheckedContinuation { c in
            let ready = inner.withLock { s -> Result<DownloadResult, HaulError>? in
                if s.state == .completed {
                    if let r = s.result { return .success(r) }
                    return .failure(s.error ?? HaulError(.cancelled, "cancelled"))
                }
                s.waiters.append(c)
                return nil
            }
            if let ready { c.resume(returning: ready) }
        }
        return try result.get()
    }

    // MARK: - Running

    private func run(generation: Int) async {
        if let d = inner.withLock({ $0.destination?.path }),
            let offset = DownloadStore.resumeRecord(of: url, at: d)?.contiguousBytes, offset > 0
        {
            emit(.resumed(offset: offset))
        }
        let result: Result<DownloadResult, HaulError>
        do {
            result = .success(
                try await session.run(url, to: destination, options: options) { [self] event in
                    inner.withLock { s in
                        if case .started(let start) = event { s.destination = .started(start.destination) }
                        if case .progress(let p) = event { s.progress = p }
                    }
                    emit(event)
                })
        } catch {
            result = .failure(error)
        }
        let stop = inner.withLock { s -> Stop? in
            guard s.generation == generation else { return .suspend }  // superseded
            return s.stop
        }
        if stop == .suspend, case .failure(let e) = result, e.code == .cancelled { return }
        complete(result, stop: stop)
    }

    private func complete(_ result: Result<DownloadResult, HaulError>, stop: Stop?) {
        // Once: the cancel of a suspended task whose transfer finished anyway comes second.
        let first = inner.withLock { s -> Bool in
            defer { s.ended = true }
            return !s.ended
        }
        guard first else { return }
        var result = result
        if stop == .cancel || stop == .cancelKeepingData {
            if case .success = result {} else { result = .failure(HaulError(.cancelled, "cancelled")) }
        }
        if stop == .cancel, case .failure = result, let d = inner.withLock({ $0.destination?.path }) {
            // Only this URL's partial, as haul wrote it: a task cancelled before it ran (or one
            // refused for files it could not vouch for) leaves what is at those names alone.
            DownloadStore.discardPartial(of: url, at: d)
        }
        let (waiters, subscribers) = inner.withLock {
            s -> (
                [CheckedContinuation<Result<DownloadResult, HaulError>, Never>],
                [AsyncStream<DownloadEvent>.Continuation]
            ) in
            s.state = .completed
            switch result {
            case .success(let r): s.result = r
            case .failure(let e): s.error = e
            }
            defer {
                s.waiters = []
            }
            return (s.waiters, Array(s.subscribers.values))
        }
        switch result {
        case .success(let r): emit(.completed(r.fileURL))
        case .failure(let e): emit(.failed(e))
        }
        for s in subscribers { s.finish() }
        inner.withLock { $0.subscribers = [:] }
        for w in waiters { w.resume(returning: result) }
    }

    private func emit(_ event: DownloadEvent) {
        let (subscribers, handlers) = inner.withLock { (Array($0.subscribers.values), $0.handlers) }
        for s in subscribers { s.yield(event) }
        for h in handlers { h(event) }
    }
}

/// Receives a ``DownloadTask``'s events (see ``DownloadTask/setDelegate(_:)``).
public protocol DownloadTaskDelegate: AnyObject, Sendable {
    /// An event happened: progress, retry, suspension, completion, failure.
    func downloadTask(_ task: DownloadTask, didReceive event: DownloadEvent)
}

extension HaulSession {
    /// Creates a suspended task that downloads `url` into `destination`; call
    /// ``DownloadTask/resume()`` to start it.
    public func downloadTask(
        with url: URL, to destination: DownloadDestination, options: DownloadOptions = DownloadOptions()
    ) -> DownloadTask {
        DownloadTask(session: self, url: url, destination: destination, options: options)
    }

    /// Creates a suspended task that continues from resume data (from this process or an earlier
    /// one). If the partial file is gone it starts over; a `.part` that is not the one the data
    /// was made from (replaced, copied, another program's) fails the task with
    /// ``HaulError/Code/destinationExists``, as without resume data.
    public func downloadTask(
        withResumeData resumeData: ResumeData, options: DownloadOptions = DownloadOptions()
    )
        -> DownloadTask
    {
        // Writes the record again if it was removed and the partial is still the one the data
        // was made from; otherwise the download judges what it finds.
        DownloadStore.restore(resumeData.record, at: resumeData.destination.path)
        var options = options
        options.resume = true
        return DownloadTask(
            session: self, url: resumeData.url, destination: .file(resumeData.destination), options: options)
    }
}
