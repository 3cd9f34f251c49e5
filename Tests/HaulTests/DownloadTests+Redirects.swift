import Foundation
import Haul
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

extension DownloadTests {
    @Test func redirectChainIsFollowedAndLoopsAreCaught() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("r.bin")
        let (ok, _) = await run(testSession(), server.url("/r.bin?size=5000&redirect=4"), to: .file(dest))
        #expect(ok.error == nil)
        expectFile(dest.path, equals: TestContent.bytes(count: 5000))
        #expect(server.requests(path: "/r.bin").count == 5)

        let (loop, _) = await run(
            testSession(), server.url("/loop?loop=1"), to: .file(dir.url.appendingPathComponent("l")))
        #expect(loop.error?.code == .tooManyRedirects)
        let (long, _) = await run(
            testSession { $0.maxRedirects = 2 }, server.url("/long?size=10&redirect=5"),
            to: .file(dir.url.appendingPathComponent("m")))
        #expect(long.error?.code == .tooManyRedirects)
    }

    @Test func stalledConnectionIsDetectedWithinTheIdleTimeoutAndResumed() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("stall.bin")
        let started = Date()
        let (result, log) = await run(
            testSession { $0.timeout.idle = 2 }, server.url("/stall.bin?size=2000000&stall=800000&stalls=1"),
            to: .file(dest))
        #expect(result.error == nil)
        expectFile(dest.path, equals: TestContent.bytes(count: 2_000_000))
        // A timeout, not the end of the server's stall (60 s), is what ended the first answer.
        #expect(log.retries.first?.1.code == .timeout)
        #expect(server.requests(path: "/stall.bin").map(\.rangeStart) == [nil, 800_000])
        #expect(Date().timeIntervalSince(started) < 50)
    }

    @Test func authorizationIsNotForwardedToAnotherHost() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let target = "http://localhost:\(server.port)/landing.bin?size=100"
        let encoded = target.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        let session = testSession {
            $0.additionalHeaders = ["Authorization": "Bearer s3cret", "Cookie": "id=1", "X-Trace": "t1"]
        }
        let (result, _) = await run(
            session, server.url("/start?to=\(encoded)"), to: .file(dir.url.appendingPathComponent("a.bin")))
        #expect(result.error == nil)
        let first = try #require(server.requests(path: "/start").first)
        let second = try #require(server.requests(path: "/landing.bin").first)
        #expect(first.header("Authorization") == "Bearer s3cret")
        #expect(second.header("Host")?.hasPrefix("localhost") == true)
        #expect(second.header("Authorization") == nil)
        #expect(second.header("X-Trace") == "t1", "other headers follow, as with curl")
        #expect(second.header("Cookie") == nil)
    }

    @Test func authorizationIsKeptOnTheSameHost() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let session = testSession { $0.additionalHeaders = ["Authorization": "Bearer s3cret"] }
        let (result, _) = await run(
            session, server.url("/same.bin?size=10&redirect=1"), to: .file(dir.url.appendingPathComponent("s")))
        #expect(result.error == nil)
        #expect(server.requests.allSatisfy { $0.header("Authorization") == "Bearer s3cret" })
    }

    @Test func urlCredentialsFollowSameHostRedirectsOnly() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let basic = "Basic " + Data("alice:pa55".utf8).base64EncodedString()
        let same = URL(string: "http://alice:pa55@127.0.0.1:\(server.port)/same-cred?size=10&redirect=2")!
        let (ok, _) = await run(testSession(), same, to: .file(dir.url.appendingPathComponent("a")))
        #expect(ok.error == nil)
        #expect(server.requests(path: "/same-cred").map { $0.header("Authorization") } == [basic, basic, basic])

        let target = "http://localhost:\(server.port)/other-host?size=10"
        let encoded = target.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        let cross = URL(string: "http://alice:pa55@127.0.0.1:\(server.port)/hop?to=\(encoded)")!
        let (moved, _) = await run(testSession(), cross, to: .file(dir.url.appendingPathComponent("b")))
        #expect(moved.error == nil)
        #expect(server.requests(path: "/hop").first?.header("Authorization") == basic)
        #expect(server.requests(path: "/other-host").first?.header("Authorization") == nil)
    }

    /// A redirect target's query can be a credential: a storage service's pre-signed link carries
    /// its signature (and the key's id) there, and error messages end up in logs and bug reports.
    /// A message names a redirect target without its query; the URL the user gave keeps its own.
    @Test(arguments: [1, 4])
    func aRedirectTargetsQueryStaysOutOfMessages(connections: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        var options = DownloadOptions()
        options.connections = connections
        let session = testSession { $0.retry.maxRetries = 0 }
        for (status, name) in [(403, "refused"), (503, "busy")] {
            let target = "/\(name).bin?status=\(status)&X-Amz-Credential=AKIDEXAMPLE&X-Amz-Signature=5ec2e7"
            let encoded = target.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
            let (result, _) = await run(
                session, server.url("/\(name)-start?token=mine&to=\(encoded)"),
                to: .file(dir.url.appendingPathComponent("\(name).bin")), options: options)
            let error = try #require(result.error)
            #expect(error.httpStatus == status, "\(error.message)")
            #expect(error.message.contains("/\(name).bin"), "\(error.message)")
            #expect(!error.message.contains("5ec2e7") && !error.message.contains("AKIDEXAMPLE"), "\(error.message)")
        }
        let (own, _) = await run(
            session, server.url("/own.bin?status=403&token=mine"),
            to: .file(dir.url.appendingPathComponent("own.bin")), options: options)
        #expect(
            own.error?.message.contains("/own.bin?status=403&token=mine") == true, "\(String(describing: own.error))")
    }

    @Test func credentialsNeverReachTheRecord() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("cred.bin")
        let url = URL(string: "http://alice:pa55word@127.0.0.1:\(server.port)/cred.bin?size=500000&drop=200000")!
        var options = DownloadOptions()
        options.headers = ["Authorization": "Bearer tok-123"]
        let (result, _) = await run(testSession { $0.retry.maxRetries = 0 }, url, to: .file(dest), options: options)
        let error = try #require(result.error)
        #expect(!error.message.contains("pa55word"))
        let record = String(decoding: bytes(at: dest.path + ".haul"), as: UTF8.self)
        #expect(record.contains("\"url\" : \"http://127.0.0.1:\(server.port)/cred.bin"))
        #expect(!record.contains("pa55word") && !record.contains("alice") && !record.contains("tok-123"))
        #expect(server.requests.first?.header("Authorization") == "Bearer tok-123")
    }
}
