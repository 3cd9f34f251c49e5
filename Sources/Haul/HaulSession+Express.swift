import HaulCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The express way of a small file into a directory (``ExpressDownload``, docs/small-downloads.md),
/// for `haul get -j`: the download without a task, a session run or a manager's item.
extension HaulSession {
    /// How an express download ended.
    package enum ExpressEnd: Sendable {
        /// Saved, with how its answer began.
        case saved(DownloadResult, DownloadStart)
        /// Not done; nothing of it is left: the full engine takes it, with these options (the
        /// answer so far, as its first probe).
        case declined(DownloadOptions)
    }

    /// Starts `url` into `directory` the express way, or returns nil where its options need
    /// the full engine: one connection (its request has no Range), digests to check,
    /// `overwrite`, revalidation, a reachability check, a resource timeout. `saving` is called
    /// (at most once, usually on the transport's thread) with the file's size when the whole
    /// file has come and its save begins; `completion` once, on a thread of the transport or
    /// the file worker (possibly before this returns). `worker` writes, syncs and names the
    /// file (the process's own unless a test gives another).
    package func startExpress(
        _ url: URL, into directory: URL, options: DownloadOptions, saving: @escaping @Sendable (Int) -> Void = { _ in },
        worker: FileWorker = .shared, completion: @escaping @Sendable (ExpressEnd) -> Void
    ) -> ExpressDownload? {
        startExpress(
            url, intoDirectoryAt: Sys.lexicallyNormalized(directory.path), options: options, saving: saving,
            worker: worker, completion: completion)
    }

    /// ``startExpress(_:into:options:saving:completion:)`` into the directory at `path`, absolute
    /// and lexically normalised (``Sys/lexicallyNormalized(_:)``): a run of many URLs into one
    /// directory works its path out once, not once a URL.
    package func startExpress(
        _ url: URL, intoDirectoryAt path: String, options: DownloadOptions,
        saving: @escaping @Sendable (Int) -> Void = { _ in }, worker: FileWorker = .shared,
        completion: @escaping @Sendable (ExpressEnd) -> Void
    ) -> ExpressDownload? {
        assert(path.hasPrefix("/") && path == Sys.lexicallyNormalized(path), "not a normalised absolute path: \(path)")
        guard options.connections > 1, options.checksums.isEmpty, !options.overwrite, !options.revalidatesExistingFile,
            !options.checksReachability, configuration.timeout.resource == nil,
            let transport = try? readyTransport(),
            let engineOptions = try? engineOptions(options, for: url)
        else { return nil }
        return ExpressDownload.start(
            url, into: path, options: engineOptions,
            minSplit: options.minSplitSize, connections: options.connections, transport: transport, saving: saving,
            worker: worker
        ) { end in
            switch end {
            case .declined(let prefetched):
                var options = options
                options.prefetched = prefetched
                completion(.declined(options))
            case .saved(let outcome, let status, let finalURL):
                let file = URL(filePath: outcome.path, directoryHint: .notDirectory)
                completion(
                    .saved(
                        DownloadResult(fileURL: file, bytes: outcome.bytes, alreadyComplete: false),
                        DownloadStart(
                            status: status, url: finalURL, destination: file, offset: 0, totalBytes: outcome.bytes)))
            }
        }
    }
}
