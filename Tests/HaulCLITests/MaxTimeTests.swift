import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

@Suite("haul get -m/--max-time", .fewAtOnce)
struct MaxTimeTests {
    @Test func pastItExits3WithOneLineAndKeepsThePartial() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let url = server.url("/slow.bin?size=4000000&rate=200000").absoluteString
        let r = try await CLI.run(["get", "-m", "1", "-o", dir.file("slow.bin"), url])
        #expect(r.status == 3, "\(r.stderr)")
        let errors = r.stderr.split(separator: "\n").filter { $0.hasPrefix("haul: error: ") }
        #expect(errors.count == 1 && errors[0].contains("did not finish within 1 s"), "\(r.stderr)")
        #expect(FileManager.default.fileExists(atPath: dir.file("slow.bin.part")))
        #expect(!FileManager.default.fileExists(atPath: dir.file("slow.bin")))
    }

    @Test(arguments: ["0", "-1", "x"])
    func aBadValueIsAUsageError(value: String) async throws {
        let r = try await CLI.run(["get", "--max-time", value, "http://127.0.0.1:1/x"])
        #expect(r.status == 2)
        #expect(r.stderr.hasPrefix("haul: error: --max-time expects a number"), "\(r.stderr)")
    }
}
