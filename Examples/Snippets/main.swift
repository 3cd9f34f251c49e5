// The code the DocC articles show (Sources/Haul/Haul.docc), compiled with the package so that
// no snippet can rot: DocCSnippetTests checks that each article's code blocks are here, line for
// line. Each function is one article's; none of them is run (the Examples beside this one are
// the programs that run against the test server).
// usage: SnippetsExample (prints what it is)
import Foundation
import Haul

print("the code of Haul's DocC articles, compiled, not run")

// <doc:OneShot>
func oneShot(_ session: HaulSession, _ url: URL) async throws {
    let (data, response) = try await session.data(from: url)  // cap: 64 MiB
    let (small, _) = try await session.data(from: url, maxBytes: 1 << 20)
    session.data(from: url, completionHandler: { result in print(result) })
    let (json, _) = try await session.data(for: HaulRequest(url: url, headers: ["Accept": "application/json"]))
    print(data.count, response.statusCode, small.count, json.count)
}

// <doc:Streaming>
func streaming(
    _ session: HaulSession, _ url: URL, consume: (Data) -> Void, delegate: any DataStreamDelegate
)
    async throws
{
    let (response, body) = try await session.bytes(from: url)  // window: 1 MiB
    for try await chunk in body { consume(chunk) }
    session.stream(from: url, delegate: delegate)  // a DataStreamDelegate
    print(response.statusCode)
}

// <doc:DownloadingToAFile>
func downloadingToAFile(_ session: HaulSession, _ url: URL, dest: URL, downloads: URL, docs: URL) async throws {
    try await session.download(from: url, to: .file(dest))
    try await session.download(from: url, to: .directory(downloads)) { event in print(event) }
    try await session.download(
        from: url,
        to: .custom { temporaryURL, response in
            (
                docs.appendingPathComponent(response.url.lastPathComponent),
                [.createIntermediateDirectories, .removePreviousFile]
            )
        })
    session.download(from: url, to: .file(dest), completionHandler: { result in print(result) })
}

// <doc:ControllableTasks>
func controllableTasks(_ session: HaulSession, _ url: URL, dest: URL, saved: URL) async throws {
    let task = session.downloadTask(with: url, to: .file(dest))  // created suspended
    task.resume()
    task.suspend()  // the transfer stops; bytes and record are kept
    task.resume()  // a Range request at the same offset
    let data = await task.cancelProducingResumeData()  // or task.cancel(producingResumeData:)
    try data?.encoded().write(to: saved)
    let again = session.downloadTask(withResumeData: try ResumeData(data: Data(contentsOf: saved)))
    again.resume()
    let result = try await again.finished()
    print(result.fileURL)
}

func cancelling(_ session: HaulSession, _ url: URL, dest: URL) {
    let unwanted = session.downloadTask(with: url, to: .file(dest))
    unwanted.resume()
    unwanted.cancel()  // removes the partial and its record
}

// <doc:TheDownloadManager>
func theDownloadManager(
    _ url: URL, downloads: URL, render: @escaping @Sendable ([DownloadManager.Item]) -> Void
) async throws {
    var configuration = DownloadManager.Configuration()
    configuration.maxConcurrentDownloads = 3  // default 3
    configuration.maxDownloadsPerHost = 2  // default 2 (scheme, host, port)
    let manager = try DownloadManager(configuration: configuration)
    let id = manager.add(
        url, to: .directory(downloads), priority: 1,
        progress: { p in print(p.completedBytes) },
        events: { event in print(event) },  // started, retrying, …
        completion: { result in print(result) })
    manager.pause(id)
    manager.resume(id)
    manager.cancel(id)
    let watching = Task { for await list in manager.updates { render(list) } }  // the observable list
    print(manager.aggregateProgress)  // all items together
    await manager.waitUntilIdle()
    await manager.shutdown()  // stops, keeps the bytes and the list
    watching.cancel()
}

func scoped(_ url: URL) async throws {
    try await withDownloadManager { manager in  // always shut down afterwards
        manager.add(url)
        await manager.waitUntilIdle()
    }
}

// <doc:BackgroundSessions>
func backgroundSessions(_ url: URL) async throws {
    let configuration = HaulConfiguration.background(identifier: "com.example.sync")
    let session = try await BackgroundSession(configuration: configuration)
    let download = try await session.download(from: url, in: "sync")  // queued in the daemon
    print(download.id)  // this process may exit now

    // Later, in another process: the same identifier reattaches.
    let again = try await BackgroundSession(configuration: configuration)
    print(try await again.downloads().count)  // every download of the session, ended ones too
    for try await event in again.events {
        switch event {
        case .finished(let ended): print(ended.state, ended.fileURL?.path ?? "")  // each end once
        case .caughtUp: print("told of every end while away")  // then live changes
        case .updated, .progress, .removed: break
        }
    }
}

// <doc:ProgressAndEvents>
func progressAndEvents(_ session: HaulSession, _ url: URL, downloads: URL) async throws {
    try await session.download(from: url, to: .directory(downloads)) { event in
        if case .progress(let p) = event {
            print(p.fraction ?? 0, p.completedBytes, p.totalBytes ?? -1)
            print(p.bytesPerSecond, p.smoothedBytesPerSecond, p.estimatedTimeRemaining ?? -1)
        }
    }
}

// <doc:Uploading>
func uploading(_ session: HaulSession, _ url: URL, delegate: any UploadDelegate) async throws {
    var form = MultipartForm()
    form.addField(name: "title", value: "Holiday")
    try form.addFile(name: "photo", fileURL: URL(fileURLWithPath: "beach.jpg"))  // type guessed: image/jpeg
    form.addFile(name: "notes", data: Data("…".utf8), filename: "notes.txt")
    let reply = try await session.upload(form, to: url) { event in
        if case .progress(let p) = event { print(p.fraction ?? 0) }  // bytes sent
    }
    print(reply.response.statusCode, String(decoding: reply.body, as: UTF8.self))

    _ = try await session.upload(fileAt: URL(fileURLWithPath: "disk.img"), to: url)  // a raw PUT
    _ = try await session.upload(form, to: url, delegate: delegate)  // an UploadDelegate
    session.upload(form, to: url, completionHandler: { result in print(result) })
}

func uploadingFromAFunction(_ form: inout MultipartForm, _ fd: Int32) {
    form.addFile(name: "log", filename: "app.log") { buffer in read(fd, buffer.baseAddress, buffer.count) }
}

// <doc:ResumeAndResumeData>
func resuming(_ session: HaulSession, _ url: URL, dest: URL, sha256: String) async throws {
    var options = DownloadOptions()
    options.checksums = [try Checksum("sha-256=" + sha256)]  // hashed as it is written
    do {
        try await session.download(from: url, to: .file(dest), options: options)
    } catch {
        guard error.code == .network || error.code == .timeout else { throw error }
        // The partial file and its record are kept: the same call again continues from them.
        try await session.download(from: url, to: .file(dest), options: options)
    }
}

// <doc:NetworkAwareness>
func networkAwareness(_ url: URL, downloads: URL) async throws {
    let monitor = NetworkMonitor()
    var configuration = DownloadManager.Configuration()
    configuration.network = monitor  // downloads wait while there is no usable path
    configuration.allowsCellularAccess = false
    configuration.waitsForConnectivity = true  // false: fail with .networkUnavailable instead
    let manager = try DownloadManager(configuration: configuration)
    manager.add(url, to: .directory(downloads))
    let banner = Task {
        for await path in monitor.paths {  // the current path, then every change
            print(path.status, path.primary?.kind ?? .other, path.isExpensive, path.reason ?? "")
        }
    }
    let spinner = Task { for await transfers in manager.activity.updates { print("\(transfers) on the wire") } }
    await manager.waitUntilIdle()
    banner.cancel()
    spinner.cancel()
}

// <doc:Errors>
func errors(_ session: HaulSession, _ url: URL, downloads: URL) async {
    do {
        try await session.download(from: url, to: .directory(downloads))
    } catch  where error.code == .httpStatus {
        print("the server said \(error.httpStatus ?? 0): \(error.message)")
    } catch  where error.code == .diskFull {
        print("no space left; the partial stays resumable: \(error.path ?? "")")
    } catch {
        print(error.code, error.message)  // one line that names the cause
    }
}
