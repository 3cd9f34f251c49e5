import Foundation
import Haul
import HaulTestSupport
import Testing

@Suite("TLS", .enabled(if: SelfSignedHTTPSServer.available, "needs openssl, timeout and python3"))
struct TLSTests {
    @Test func selfSignedServerIsRefusedByDefaultAndNothingIsWritten() async throws {
        let server = try await SelfSignedHTTPSServer(serving: ["f.bin": TestContent.bytes(count: 100_000)])
        let dir = try TemporaryDirectory()
        defer {
            server.stop()
            dir.remove()
        }
        let (result, _) = await run(
            testSession(), server.url("/f.bin"), to: .file(dir.url.appendingPathComponent("f.bin")))
        let error = try #require(result.error)
        #expect(error.code == .tlsFailure)
        #expect(error.message.contains("127.0.0.1"))
        #expect(dir.contents().isEmpty)
    }

    @Test func trustingTheCertificateWorks() async throws {
        let server = try await SelfSignedHTTPSServer(serving: ["f.bin": TestContent.bytes(count: 100_000)])
        let dir = try TemporaryDirectory()
        defer {
            server.stop()
            dir.remove()
        }
        let session = testSession { $0.trustedCertificatesFile = server.certificate }
        let dest = dir.url.appendingPathComponent("f.bin")
        let (result, _) = await run(session, server.url("/f.bin"), to: .file(dest))
        #expect(result.error == nil, "\(String(describing: result.error))")
        expectFile(dest.path, equals: TestContent.bytes(count: 100_000))
    }
}
