import CHaulCurl
import Dispatch
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Where blocking work runs, off the threads of Swift's cooperative pool.
extension Sys {
    /// A queue for work that blocks (fsync on a slow disk, a checksum of a large file): a serial
    /// queue of its own for each job, which Dispatch runs on a thread it adds for it (threads are
    /// reused; queues cost a small object each). Not the global concurrent queue: on Linux its
    /// threads are the ones Swift's tasks run on, and work that blocks there leaves none for
    /// them (eight held syncs stop every task until released; tested). Not a fixed pool:
    /// eight downloads' checkpoints on a slow disk would wait behind each other (the same test
    /// holds eight at once). At most one checkpoint per download is in flight.
    package static func blockingQueue() -> DispatchQueue { DispatchQueue(label: "haul.blocking") }

    /// A serial queue of its own for one long-lived job that blocks (the file worker's syncer).
    package static func ownBlockingQueue(_ label: String) -> DispatchQueue { DispatchQueue(label: label) }

    /// Runs long blocking work that touches no directory (hashing a large file) on a queue of
    /// its own (``blockingQueue()``) instead of one of the few threads of Swift's cooperative
    /// pool. File-system work of downloads (creates, syncs, renames) goes to ``FileWorker``.
    package static func offload<T: Sendable>(
        _ body: @escaping @Sendable () throws(HaulError) -> T
    ) async throws(HaulError) -> T {
        let result = await withCheckedContinuation { (c: CheckedContinuation<Result<T, HaulError>, Never>) in
            blockingQueue().async {
                do throws(HaulError) { c.resume(returning: .success(try body())) } catch {
                    c.resume(returning: .failure(error))
                }
            }
        }
        return try result.get()
    }
}

/// A thread of its own, for the loops that block in poll(2) for their whole life (libcurl's
/// event loop, the route-event reader): Foundation's `Thread` without Foundation.
extension Sys {
    private final class ThreadBody {
        let name: String
        let body: () -> Void
        init(name: String, body: @escaping () -> Void) {
            self.name = name
            self.body = body
        }
    }

    /// Starts `body` on a new detached thread called `name` (at most 15 bytes show in `ps`).
    /// Fails only when the system has no thread left to give, which is fatal for the caller's
    /// loop as it was for `Thread.start()`.
    package static func startThread(name: String, _ body: @escaping @Sendable () -> Void) {
        let context = Unmanaged.passRetained(ThreadBody(name: name, body: body)).toOpaque()
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        #if canImport(Darwin)
            var thread: pthread_t?
        #else
            var thread = pthread_t()
        #endif
        let status = pthread_create(
            &thread, &attributes,
            { raw in
                #if canImport(Darwin)
                    let context = raw
                #else
                    let context = raw!
                #endif
                let job = Unmanaged<ThreadBody>.fromOpaque(context).takeRetainedValue()
                haul_set_thread_name(job.name)
                job.body()
                return nil
            }, context)
        precondition(status == 0, "pthread_create failed: \(Errno(status))")
    }
}
