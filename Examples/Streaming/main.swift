// Way 2: stream a body chunk by chunk (back-pressure: a slow loop pauses the transfer).
// usage: StreamingExample URL OUTPUT
import Foundation
import Haul

let args = CommandLine.arguments
guard args.count == 3, let url = URL(string: args[1]) else {
    print("usage: StreamingExample URL OUTPUT")
    exit(2)
}
do {
    let (response, body) = try await HaulSession().bytes(from: url)
    _ = FileManager.default.createFile(atPath: args[2], contents: nil)
    let out = try FileHandle(forWritingTo: URL(fileURLWithPath: args[2]))
    var chunks = 0
    var total = 0
    for try await chunk in body {
        try out.write(contentsOf: chunk)
        chunks += 1
        total += chunk.count
    }
    try out.close()
    print("HTTP \(response.statusCode), \(total) bytes in \(chunks) chunks")
} catch {
    print("error: \(error)")
    exit(1)
}
