// Pause, resume, cancel with resume data, and resume in a new process.
// usage: ResumeWalkthrough start URL FILE RESUMEDATA   (stops after the first bytes)
//        ResumeWalkthrough resume RESUMEDATA
import Foundation
import Haul

let args = CommandLine.arguments
let session = HaulSession()
switch (args.count, args.count > 1 ? args[1] : "") {
case (5, "start"):
    guard let url = URL(string: args[2]) else { exit(2) }
    let task = session.downloadTask(with: url, to: .file(URL(fileURLWithPath: args[3])))
    task.resume()
    while (task.progress?.completedBytes ?? 0) < 100_000 { try await Task.sleep(nanoseconds: 10_000_000) }
    task.suspend()
    print("paused at \(task.progress?.completedBytes ?? 0)")
    task.resume()
    try await Task.sleep(nanoseconds: 100_000_000)
    guard let data = await task.cancelProducingResumeData() else {
        print("nothing to resume")
        exit(1)
    }
    try data.encoded().write(to: URL(fileURLWithPath: args[4]))
    print("saved resume data: \(data.bytesOnDisk) bytes on disk")
case (3, "resume"):
    let data = try ResumeData(data: Data(contentsOf: URL(fileURLWithPath: args[2])))
    let task = session.downloadTask(withResumeData: data)
    task.resume()
    let result = try await task.finished()
    print("resumed from \(data.bytesOnDisk), finished \(result.bytes) bytes")
default:
    print("usage: ResumeWalkthrough start URL FILE RESUMEDATA | resume RESUMEDATA")
    exit(2)
}
