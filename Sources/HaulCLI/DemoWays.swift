import Haul
import HaulTestServer

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The modes of `haul demo`, one per way to use the library.
enum DemoWay: String {
    case file, data, stream, task, manager

    var defaultMiB: Int {
        switch self {
        case .file: 256
        case .data: 16
        case .stream, .task: 64
        case .manager: 32
        }
    }
}

/// Runs the library's ways against the embedded server and says what happened.
struct DemoWays {
    let server: TestServer
    let directory: String
    let size: Int
    let output: Output

    func run(_ way: DemoWay) async -> ExitCode {
        do throws(HaulError) {
            switch way {
            case .data: try await data()
            case .stream: try await stream()
            case .task: return try await task()
            case .manager: return await manager()
            case .file: return .usage
            }
            return .success
        } catch {
            output.error(error.message)
            return ExitCode(error)
        }
    }

    private var session: HaulSession {
        var c = HaulConfiguration()
        c.retry.initialDelay = 0.3
        c.cache = nil  // answers of a server that is gone when the demo ends: nothing to keep
        return HaulSession(configuration: c)
    }

    private func data() async throws(HaulError) {
        let url = server.url("/data.bin?size=\(size)&gzip=1")
        print("data(from:) \(url.absoluteString)  (gzip on the wire, decoded in memory)")
        let started = Date()
        let (data, response) = try await session.data(from: url)
        let same = Array(data) == TestContent.bytes(count: size)
        print(
            "✔  HTTP \(response.statusCode): \(Output.bytes(Int64(data.count))) in memory in "
                + "\(Format.fixed(Date().timeIntervalSince(started), 2)) s, content \(same ? "exact" : "WRONG")")
        do {
            _ = try await session.data(from: server.url("/data-big.bin?size=\(size * 2)"), maxBytes: size)
        } catch {
            print("✔  with maxBytes \(Output.bytes(Int64(size))) a larger body is refused: \(error.message)")
        }
    }

    private func stream() async throws(HaulError) {
        let url = server.url("/stream.bin?size=\(size)")
        print("bytes(from:) \(url.absoluteString) with a consumer that takes a chunk every 20 ms")
        let (response, body) = try await session.bytes(from: url, window: 1 << 20)
        var consumed = 0
        let started = Date()
        do {
            for try await chunk in body {
                consumed += chunk.count
                try await Task.sleep(nanoseconds: 20_000_000)
                if Date().timeIntervalSince(started) > 2 { break }
            }
        } catch {
            throw HaulError.from(error)
        }
        let sent = server.bytesSent(path: "/stream.bin")
        body.cancel()
        print("✔  HTTP \(response.statusCode); after 2 s the consumer took \(Output.bytes(Int64(consumed)))")
        print(
            "✔  the server could send only \(Output.bytes(Int64(sent))) of \(Output.bytes(Int64(size))): "
                + "the transfer pauses while the consumer is behind (1 MiB window + socket buffers)")
    }

    private func task() async throws(HaulError) -> ExitCode {
        let url = server.url("/task.bin?size=\(size)&rate=\(16 << 20)")
        let dest = URL(fileURLWithPath: directory + "/task.bin")
        let part = HaulSession.partialFileURL(for: dest).path
        func onDisk() -> Int64 { (try? FileManager.default.attributesOfItem(atPath: part)[.size] as? Int64) ?? 0 }
        let session = self.session
        print("downloadTask(with:) \(url.absoluteString), throttled to 16 MiB/s")
        let task = session.downloadTask(with: url, to: .file(dest))
        func waitFor(_ fraction: Double) async {
            while (task.progress?.fraction ?? 0) < fraction && task.state == .running {
                try? await Task.sleep(nanoseconds: 10_000_000)
            }
        }
        task.resume()
        await waitFor(0.25)
        task.suspend()
        try? await Task.sleep(nanoseconds: 300_000_000)
        let atSuspend = onDisk()
        let requests = server.requests.count
        try? await Task.sleep(nanoseconds: 1_000_000_000)
        print(
            "⏸  suspended at \(Output.bytes(atSuspend)); one second later: \(Output.bytes(onDisk())) on disk, "
                + "\(server.requests.count - requests) new requests")
        task.resume()
        await waitFor(0.6)
        guard let resumeData = await task.cancelProducingResumeData() else {
            output.error("no resume data")
            return .internalError
        }
        let stored = resumeData.encoded()
        print(
            "✂  cancelled with resume data (\(stored.count) bytes of JSON): \(Output.bytes(resumeData.bytesOnDisk)) on disk"
        )
        let again = session.downloadTask(withResumeData: try ResumeData(data: stored))
        again.resume()
        let result = try await again.finished()
        print("✔  resumed from the data and finished: \(Output.bytes(result.bytes))")
        print("\nrequests the server saw:")
        for r in server.requests(path: "/task.bin") {
            print("  GET \(r.range.map { "Range: \($0)" } ?? "(whole file)")")
        }
        let same = TestContent.difference(file: dest.path, expected: TestContent.bytes(count: size)) == nil
        print(same ? "✔  the file is exact" : "✘  the file differs")
        try? FileManager.default.removeItem(at: dest)
        return same ? .success : .integrity
    }

    private func manager() async -> ExitCode {
        var configuration = DownloadManager.Configuration()
        configuration.maxConcurrentDownloads = 2
        configuration.persistence = .ephemeral
        // Ephemeral: no list to hold, so nothing here can fail.
        guard let manager = try? DownloadManager(configuration: configuration) else { return .internalError }
        let each = max(1, size / 8)
        print("DownloadManager: 8 files of \(Output.bytes(Int64(each))), 2 at a time, 8 MiB/s per connection")
        for i in 1...8 {
            let url = server.url("/queue-\(i).bin?size=\(each)&seed=\(i)&rate=\(8 << 20)")
            manager.add(
                url, to: .directory(URL(fileURLWithPath: directory)), priority: i == 8 ? 1 : 0,
                completion: { [output] result in
                    output.clearLine()
                    switch result {
                    case .success(let r): print("✔  \(r.fileURL.lastPathComponent)")
                    case .failure(let e): print("✘  queue-\(i).bin: \(e.message)")
                    }
                })
        }
        let watcher = Task { [output] in
            while !Task.isCancelled {
                output.progress(manager.aggregateProgress, name: "8 files")
                try? await Task.sleep(nanoseconds: 100_000_000)
            }
        }
        await manager.waitUntilIdle()
        watcher.cancel()
        output.clearLine()
        let completed = manager.items.filter { $0.state == .completed }.count
        print("✔  \(completed) of 8 done; queue-8 (priority 1) ran first among the waiting ones")
        print("✔  the server never saw more than \(server.maxConcurrentRequests()) downloads at once")
        return completed == 8 ? .success : .network
    }
}
