// Way 1: one-shot into memory, with a size cap.
// usage: OneShotExample URL OUTPUT
import Foundation
import Haul

let args = CommandLine.arguments
guard args.count == 3, let url = URL(string: args[1]) else {
    print("usage: OneShotExample URL OUTPUT")
    exit(2)
}
do {
    let (data, response) = try await HaulSession().data(from: url, maxBytes: 16 << 20)
    try data.write(to: URL(fileURLWithPath: args[2]))
    print("HTTP \(response.statusCode), \(data.count) bytes")
} catch {
    print("error: \(error)")
    exit(1)
}
