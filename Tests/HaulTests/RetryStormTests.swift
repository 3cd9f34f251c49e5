import Foundation
import Haul
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

/// A server that drops every connection after a few bytes: each attempt made progress, and
/// progress refilled the retry budget, so a download retried once per thousand bytes, for ever
/// on a large file. Attempts that bring less than 64 KiB count as failures in a row now.
@Suite("Retries: a few bytes per connection do not refill the budget", .fewAtOnce)
struct RetryStormTests {
    /// Five retries (the default), each answer cut after 1000 bytes of a 10 MB body.
    static let storm = "size=10000000&drop=1000"

    @Test func oneConnectionGivesUpAfterTheRetries() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let (result, log) = await run(
            testSession(), server.url("/one.bin?\(Self.storm)"), to: .file(dir.url.appendingPathComponent("one.bin")))
        #expect(result.error != nil)
        #expect(log.retries.count == 5, "\(log.retries.count) retries")
        #expect(server.requests(path: "/one.bin").count == 6)
    }

    @Test func severalConnectionsGiveUpAfterTheRetries() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        var options = DownloadOptions()
        options.connections = 4
        let (result, log) = await run(
            testSession(), server.url("/four.bin?\(Self.storm)"), to: .file(dir.url.appendingPathComponent("four.bin")),
            options: options)
        #expect(result.error != nil)
        // The connections share the budget: five retries in all, not five per connection.
        #expect(log.retries.count == 5, "\(log.retries.count) retries")
        // The probe, at most four ranges, and one request per retry.
        let requests = server.requests(path: "/four.bin").count
        #expect(requests <= 1 + 4 + 5, "\(requests) requests")
    }

    @Test func aStreamGivesUpAfterTheRetries() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        let (_, body) = try await testSession().bytes(from: server.url("/stream.bin?\(Self.storm)"))
        var received = 0
        var failure: HaulError?
        do {
            for try await chunk in body { received += chunk.count }
        } catch {
            failure = error as? HaulError
        }
        #expect(failure != nil)
        #expect(received <= 6 * 1000, "\(received) bytes")
        #expect(server.requests(path: "/stream.bin").count == 6)
    }

    /// Progress of 64 KiB or more between failures still refills it: a link that drops every
    /// 100 KB finishes.
    @Test func realProgressStillRefillsTheBudget() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("flaky.bin")
        let (result, log) = await run(testSession(), server.url("/flaky.bin?size=1000000&drop=100000"), to: .file(dest))
        #expect(result.error == nil, "\(result.error?.message ?? "")")
        #expect(log.retries.count == 9)
        expectFile(dest.path, equals: TestContent.bytes(count: 1_000_000))
    }
}

@Suite("RetryBudget", .fewAtOnce)
struct RetryBudgetTests {
    var error: HaulError {
        var e = HaulError(.network, "reset")
        e.isTransient = true
        return e
    }

    @Test func failuresInARowUseUpTheBudget() throws {
        var budget = RetryBudget(RetryPolicy(maxRetries: 2, baseDelay: 0, maxDelay: 0))
        budget.progressed(1000)
        #expect(try budget.failed(error).attempt == 1)
        budget.progressed(1000)
        #expect(try budget.failed(error).attempt == 2)
        budget.progressed(1000)
        #expect(throws: HaulError.self) { try budget.failed(error) }
    }

    @Test func progressOfARefillRestartsTheCount() throws {
        var budget = RetryBudget(RetryPolicy(maxRetries: 1, baseDelay: 0, maxDelay: 0))
        #expect(try budget.failed(error).attempt == 1)
        budget.progressed(RetryBudget.refillBytes / 2)
        budget.progressed(RetryBudget.refillBytes / 2)
        #expect(try budget.failed(error).attempt == 1, "64 KiB in two parts refill it")
    }

    @Test func theServersRetryAfterIsTheWait() throws {
        var budget = RetryBudget(RetryPolicy(maxRetries: 3, baseDelay: 1, maxDelay: 1))
        let busy = HaulError(.httpStatus, "HTTP 503", httpStatus: 503, retryAfter: 7)
        #expect(try budget.failed(busy).delay == 7)
    }
}
