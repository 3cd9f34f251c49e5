// Way 5: a queue with caps, priorities and per-item completion.
// usage: ManagerExample DIRECTORY URL...
import Foundation
import Haul

let args = CommandLine.arguments
guard args.count >= 3 else {
    print("usage: ManagerExample DIRECTORY URL...")
    exit(2)
}
var configuration = DownloadManager.Configuration()
configuration.maxConcurrentDownloads = 2
configuration.persistence = .ephemeral
let manager = try DownloadManager(configuration: configuration)
for raw in args.dropFirst(2) {
    guard let url = URL(string: raw) else { continue }
    manager.add(
        url, to: .directory(URL(fileURLWithPath: args[1])),
        completion: { result in
            switch result {
            case .success(let r): print("done \(r.fileURL.lastPathComponent)")
            case .failure(let e): print("failed \(url.lastPathComponent): \(e)")
            }
        })
}
await manager.waitUntilIdle()
let p = manager.aggregateProgress
print("all done: \(p.completedBytes) bytes, \(manager.items.filter { $0.state == .completed }.count) files")
