// Way 6: a background session. Its downloads run in `haul serve` and go on after this process
// exits; a later process with the same identifier reattaches and is told what ended meanwhile.
// usage: BackgroundExample add IDENTIFIER URL...   hand the URLs to haul serve, then exit at once
//        BackgroundExample attach IDENTIFIER       list the session's downloads, print each one
//                                                  that ended while away, then "caught up"
//        BackgroundExample wait IDENTIFIER         as attach, then go on until none is unfinished
import Foundation
import Haul

let args = CommandLine.arguments
guard args.count >= 3, ["add", "attach", "wait"].contains(args[1]), args[1] != "add" || args.count >= 4 else {
    print("usage: BackgroundExample add IDENTIFIER URL... | attach IDENTIFIER | wait IDENTIFIER")
    exit(2)
}

func describe(_ download: BackgroundDownload) -> String {
    let name = download.fileURL?.lastPathComponent ?? download.url.lastPathComponent
    switch download.state {
    case .completed: return "completed \(download.id) \(name) \(download.progress.completedBytes) bytes"
    case .failed: return "failed \(download.id) \(name): \(download.failureReason ?? "no reason given")"
    default: return "\(download.state.rawValue) \(download.id) \(name)"
    }
}

do {
    let session = try await BackgroundSession(configuration: .background(identifier: args[2]))
    if args[1] == "add" {
        for text in args.dropFirst(3) {
            guard let url = URL(string: text) else { continue }
            let download = try await session.download(from: url)
            print("queued \(download.id) \(url.lastPathComponent)")
        }
        exit(0)  // the daemon goes on with them
    }
    let downloads = try await session.downloads()
    print("\(downloads.count) downloads, \(downloads.filter { !$0.state.isEnded }.count) unfinished")
    var caughtUp = false
    for try await event in session.events {
        switch event {
        case .finished(let download): print(describe(download))
        case .caughtUp:
            print("caught up")
            caughtUp = true
        default: break
        }
        guard caughtUp else { continue }
        if args[1] == "attach" { break }
        if try await session.downloads().allSatisfy({ $0.state.isEnded }) { break }
    }
} catch {
    print("error: \(error.message)")
    exit(1)
}
