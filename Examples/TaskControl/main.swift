// Way 4: a controllable task: start, suspend, resume, wait.
// usage: TaskControlExample URL FILE
import Foundation
import Haul

let args = CommandLine.arguments
guard args.count == 3, let url = URL(string: args[1]) else {
    print("usage: TaskControlExample URL FILE")
    exit(2)
}
let task = HaulSession().downloadTask(with: url, to: .file(URL(fileURLWithPath: args[2])))
task.resume()
while (task.progress?.completedBytes ?? 0) == 0 { try await Task.sleep(nanoseconds: 10_000_000) }
task.suspend()
print("suspended at \(task.progress?.completedBytes ?? 0) bytes, state \(task.state)")
try await Task.sleep(nanoseconds: 300_000_000)
task.resume()
do {
    let result = try await task.finished()
    print("finished: \(result.bytes) bytes, state \(task.state)")
} catch {
    print("error: \(error)")
    exit(1)
}
