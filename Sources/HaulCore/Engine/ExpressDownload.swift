#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A small file into a directory, fetched and saved without a task of its own
/// (docs/small-downloads.md): one request, the same the ``SegmentedDownloader`` probes with, and
/// when its answer is the whole file, one job on the ``FileWorker`` that claims the name the
/// answer gives, writes the file with no name, syncs it and links it. Everything runs in the
/// transport's and the worker's callbacks.
///
/// It either saves the file, done, or declines and leaves nothing of its own behind: no file,
/// no partial, no claim. Anything but a plain whole answer (a redirect, an error status, a
/// failure, a larger file, a partial or a file already at the name, a digest that does not
/// match, a name another download holds) declines, and the caller runs the full engine with
/// the answer as its first probe (``PrefetchedProbe``): no answered request is made twice, a
/// larger file's first range is held for the engine as its own probe's is, and the engine says
/// what went wrong as it always does. A request that got no answer at all is the engine's to
/// make again. So the full engine stays the one place where retries,
/// resumes, redirects and errors are decided.
package final class ExpressDownload: Sendable {
    /// How it ended.
    package enum End: Sendable {
        /// Saved: the outcome, and how the answer began (for the `started` event).
        case saved(DownloadOutcome, status: Int, finalURL: URL)
        /// Not done here; nothing of it is left. The full engine takes the download, with the
        /// answer so far as its first probe (nil: no request was made, or it got no answer).
        case declined(PrefetchedProbe?)
    }

    private let url: URL
    private let directory: String
    private let options: EngineOptions
    private let claims = DestinationClaims.Owner()
    /// Its transfer while it runs (set before ``start`` returns, so before any ``cancel()``).
    private let task = Locked<(any TransportTask)?>(nil)
    /// Called once, then let go: what it holds (the caller's state, the answer it is given)
    /// must not live as long as a held transfer's callbacks.
    private let completion: Locked<(@Sendable (End) -> Void)?>
    /// Called with the file's size when its transfer has ended with the whole file and the save
    /// begins; let go then, or at the end.
    private let saving: Locked<(@Sendable (Int) -> Void)?>
    /// Where the file is written, synced and named.
    private let worker: FileWorker

    private init(
        url: URL, directory: String, options: EngineOptions, saving: @escaping @Sendable (Int) -> Void,
        worker: FileWorker, completion: @escaping @Sendable (End) -> Void
    ) {
        self.worker = worker
        self.url = url
        self.directory = directory
        self.options = options
        self.saving = Locked(saving)
        self.completion = Locked(completion)
    }

    private func end(_ end: End) {
        let completion = completion.take()
        saving.set(nil)
        task.set(nil)
        completion?(end)
    }

    /// Starts the download of `url` into `directory` (absolute, normalised). `minSplit` and
    /// `connections`: the download's, for the probe's limit and its pacing share.
    /// `completion` is called once, on the transport's or the file worker's thread, possibly
    /// before this returns. `saving`, called at most once with the file's size, says that the
    /// transfer has ended with the whole file and its save begins: a caller that paces
    /// downloads by their transfers may start the next from there. It runs on the transport's
    /// thread (libcurl's takes a start from there without a wake-up), or in this call when the
    /// transfer ended before it returned. `completion` follows, once the file is saved (by
    /// `worker`) or the save declined.
    @discardableResult
    package static func start(
        _ url: URL, into directory: String, options: EngineOptions, minSplit: Int64, connections: Int,
        transport: any HTTPTransport, saving: @escaping @Sendable (Int) -> Void = { _ in },
        worker: FileWorker = .shared, completion: @escaping @Sendable (End) -> Void
    ) -> ExpressDownload {
        let download = ExpressDownload(
            url: url, directory: directory, options: options, saving: saving, worker: worker, completion: completion)
        download.begin(
            limit: SegmentedDownloader.probeLimit(minSplit: minSplit), connections: connections, transport: transport)
        return download
    }

    /// Stops it; it declines (a cancelled transfer, which the engine takes as a cancelled probe)
    /// unless its file is being saved.
    package func cancel() { task.get()?.cancel() }

    /// Directories an express download of this process has made or found, not looked at again
    /// by the next ones: a start runs on the transport's thread, where a stat for every file
    /// would be one of its few system calls. One removed meanwhile fails the save's create,
    /// which declines, and the engine makes it again. At most 512 are kept (a run into more
    /// directories makes sure of the others at every start).
    private static let madeDirectories = RememberedSet()

    private func begin(limit: Int, connections: Int, transport: any HTTPTransport) {
        let store = DownloadStore(url: url, owner: claims, resume: options.resume, overwrite: options.overwrite)
        // A partial of this URL waiting in the directory is the full engine's to continue; so
        // are a URL it refuses and a directory it cannot make.
        let free: Bool
        do throws(HaulError) {
            try FileDownloader.validate(url)
            if !Self.madeDirectories.contains(directory) {
                try store.prepare(.directory(directory), creatingDirectories: false)
                Self.madeDirectories.insert(directory)
                // Listed with its names, for the save (before any other listing of it here).
                if options.resume { RecordIndex.shared.prepare(directory, keepingNames: true) }
            }
            free = store.partialDestination(in: directory) == nil
        } catch {
            free = false
        }
        guard free else { return end(.declined(nil)) }
        let chain = RedirectChain(
            url: url, headers: options.headers, maxRedirects: options.maxRedirects, netrc: options.netrc)
        let request = SegmentedDownloader.probeRequest(
            chain, options: options, limit: limit, connections: connections, asking: nil)
        let fetch = ProbeFetch(limit: limit)
        let started = transport.start(request, handler: fetch)
        task.set(started)
        // The answer is wrapped for the engine only when it declines: a wrapper held by these
        // callbacks could not cancel a held transfer nobody takes (see `PrefetchedProbe`).
        let answer = { @Sendable [url] in PrefetchedProbe(fetch: fetch, task: started, limit: limit, url: url) }
        fetch.onHeadOrEnd(of: started) { [self] result in
            // No answer at all (a refused connection, a name that does not resolve, a stop):
            // nothing to hand over. The engine asks itself, when the network policy and its
            // retries say so, rather than taking an old failure for its own.
            guard let response = fetch.response else { return end(.declined(nil)) }
            // `expected` is set for a whole answer only (a 200 or a 206 for all of it: never a
            // redirect or an error status).
            guard case .success? = result, !fetch.holding, let expected = fetch.expected,
                Int64(fetch.body.count) == expected
            else { return end(.declined(answer())) }
            // Told before the save is submitted: its end must not come before it (the caller
            // counts the download as saving until then).
            saving.take()?(fetch.body.count)
            save(fetch.body, response, store: store, answer: answer)
        }
    }

    /// The file worker's job: the name the answer gives, claimed; the file written with no
    /// name, synced, and linked there. Declines wherever the full engine would do more, as the
    /// directory's listing or the disk shows it (``DownloadStore/claimForWholeFile(_:)``).
    private func save(
        _ body: [UInt8], _ response: TransportResponse, store: DownloadStore,
        answer: @escaping @Sendable () -> PrefetchedProbe
    ) {
        let name = SafeFileName.suggestedName(contentDisposition: response.headers["Content-Disposition"], url: url)
        let destination = directory + "/" + name
        let expected = options.expected(vouched: Checksum.vouched(by: response.headers, status: response.status))
        worker.submit { () throws(HaulError) -> FileWorker.Step<Bool> in
            guard try store.claimForWholeFile(destination), let whole = try WholeFile.create(for: destination)
            else { return .done(false) }
            try whole.write(body, verifying: Verification(expected))
            return whole.committing { $0 == .linked }
        } completion: { [self] result in
            guard case .success(true) = result else {
                DestinationClaims.shared.releaseAll(of: claims)
                return end(.declined(answer()))
            }
            if options.keepsClaimWhenSaved {
                DestinationClaims.shared.keep(claims, savedFrom: url)
            } else {
                DestinationClaims.shared.releaseAll(of: claims)
            }
            end(
                .saved(
                    DownloadOutcome(
                        path: destination, bytes: Int64(body.count), alreadyComplete: false,
                        etag: response.headers.etag, lastModified: response.headers.lastModified),
                    status: response.status, finalURL: response.url))
        }
    }
}

/// A probe's answer made ahead of its download (an express download's that declined), for the
/// ``SegmentedDownloader`` to take as the answer to its own first probe: the same request, with
/// its transfer ended, or paused after a larger file's head. Taken once by the engine, or
/// dropped (its transfer cancelled) by a download that goes another way or a stopped run; one
/// never taken nor dropped is cancelled when the last copy of its options goes.
package final class PrefetchedProbe: Sendable, Equatable {
    /// The probe's Range limit, and the URL asked.
    let limit: Int
    let url: URL
    /// The answer and its transfer until taken or dropped: let go then, so that a copy of the
    /// options kept afterwards (a manager keeps its items' options) holds no body.
    private let answer: Locked<(fetch: ProbeFetch, task: any TransportTask)?>

    init(fetch: ProbeFetch, task: any TransportTask, limit: Int, url: URL) {
        answer = Locked((fetch, task))
        self.limit = limit
        self.url = url
    }

    deinit { drop() }

    /// The answer, the first time only.
    func take() -> (ProbeFetch, any TransportTask)? {
        answer.take()
    }

    /// Cancels its transfer unless it was taken (a download that went another way).
    package func drop() { take()?.1.cancel() }

    /// Its transfer, while not taken (tests).
    var task: (any TransportTask)? { answer.withLock { $0?.task } }

    package static func == (a: PrefetchedProbe, b: PrefetchedProbe) -> Bool { a === b }
}
