// Way 3: download to a file in one call, with progress; a rerun resumes.
// usage: DownloadFileExample URL DIRECTORY
import Foundation
import Haul

let args = CommandLine.arguments
guard args.count == 3, let url = URL(string: args[1]) else {
    print("usage: DownloadFileExample URL DIRECTORY")
    exit(2)
}
do {
    let result = try await HaulSession().download(from: url, to: .directory(URL(fileURLWithPath: args[2]))) {
        event in
        if case .retrying(let attempt, let error, _) = event { print("retry \(attempt): \(error)") }
    }
    print("saved \(result.fileURL.lastPathComponent), \(result.bytes) bytes")
} catch {
    print("error: \(error)")
    exit(1)
}
