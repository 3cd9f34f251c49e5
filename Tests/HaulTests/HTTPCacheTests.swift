import Foundation
import Haul
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

/// `data(from:)` through the HTTP cache (RFC 9111): what is kept, when it is used as it is,
/// when it is asked about again, and the cache policies. The clock is the test's.
@Suite("HTTP cache for data(from:)", .fewAtOnce)
struct HTTPCacheTests {
    final class Clock: Sendable {
        let seconds = Locked(1_800_000_000.0)
        func advance(_ by: Double) { seconds.withLock { $0 += by } }
    }

    static func session(
        _ dir: TemporaryDirectory, _ clock: Clock, capacity: Int = 1 << 20,
        policy: HaulRequest.CachePolicy = .useProtocolCachePolicy
    ) -> HaulSession {
        testSession {
            $0.cache = HTTPCache(directory: dir.url.appendingPathComponent("http"), capacity: capacity) {
                clock.seconds.get()
            }
            $0.requestCachePolicy = policy
        }
    }

    @Test func aFreshAnswerIsUsedAndAStaleOneAskedAbout() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let clock = Clock()
        let url = server.url("/fresh?size=3000&cc=max-age=60")
        let (first, _) = try await Self.session(dir, clock).data(from: url)
        #expect(Array(first) == TestContent.bytes(count: 3000))
        clock.advance(30)
        let (second, response) = try await Self.session(dir, clock).data(from: url)
        #expect(second == first && response.statusCode == 200)
        #expect(response.value(forHeader: "ETag") == "\"s1-v0-3000\"")
        #expect(server.requests(path: "/fresh").count == 1, "fresh: not asked")
        clock.advance(31)
        let (third, _) = try await Self.session(dir, clock).data(from: url)
        #expect(third == first)
        let asked = server.requests(path: "/fresh")
        #expect(asked.count == 2 && asked[1].header("If-None-Match") == "\"s1-v0-3000\"")
        #expect(server.bytesSent(path: "/fresh") == 3000, "the 304 sent no body")
        // Refreshed by the 304: fresh again for 60 s.
        clock.advance(10)
        _ = try await Self.session(dir, clock).data(from: url)
        #expect(server.requests(path: "/fresh").count == 2)
    }

    @Test func noCacheIsAskedAboutEveryTimeAndNoStoreIsNeverKept() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let clock = Clock()
        for _ in 0..<2 { _ = try await Self.session(dir, clock).data(from: server.url("/nc?size=100&cc=no-cache")) }
        #expect(server.requests(path: "/nc").map { $0.header("If-None-Match") } == [nil, "\"s1-v0-100\""])
        for _ in 0..<2 {
            _ = try await Self.session(dir, clock).data(from: server.url("/ns?size=100&cc=max-age=60,%20no-store"))
        }
        #expect(server.requests(path: "/ns").allSatisfy { $0.header("If-None-Match") == nil })
        #expect(server.requests(path: "/ns").count == 2)
        #expect(Sys.listDirectory(dir.file("http")).count == 1, "only the no-cache answer is kept")
    }

    @Test func withoutALifetimeAnAnswerIsRevalidatedNotGuessedFresh() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let clock = Clock()
        // A Last-Modified long ago and no max-age: heuristic freshness is off.
        for _ in 0..<2 { _ = try await Self.session(dir, clock).data(from: server.url("/h?size=100")) }
        #expect(server.requests(path: "/h").count == 2)
        #expect(server.requests(path: "/h").last?.header("If-Modified-Since") == HTTPDate.format(1_767_225_600))
    }

    @Test func anAnswerIsUsedOnlyForTheHeadersItVariesOn() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let clock = Clock()
        let url = server.url("/v?size=100&cc=max-age=600&vary=Accept-Language")
        func get(_ language: String) async throws {
            _ = try await Self.session(dir, clock).data(
                for: HaulRequest(url: url, headers: ["Accept-Language": language]))
        }
        try await get("fr")
        try await get("fr")
        #expect(server.requests(path: "/v").count == 1)
        try await get("de")
        #expect(server.requests(path: "/v").count == 2, "another language: asked")
        let star = server.url("/star?size=100&cc=max-age=600&vary=*")
        for _ in 0..<2 { _ = try await Self.session(dir, clock).data(from: star) }
        #expect(server.requests(path: "/star").count == 2, "Vary: * is never used")
    }

    @Test func anAnswerReachedThroughARedirectIsNotKept() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let clock = Clock()
        let url = server.url("/moved?size=100&cc=max-age=600&redirect=1")
        for _ in 0..<2 {
            let (data, response) = try await Self.session(dir, clock).data(from: url)
            #expect(Array(data) == TestContent.bytes(count: 100) && response.url.query?.contains("redirect=0") == true)
        }
        #expect(server.requests(path: "/moved").count == 4, "both hops, both times")
    }

    @Test func thePoliciesDecideWhetherTheServerIsAsked() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let clock = Clock()
        let url = server.url("/p?size=100")  // stale at once (no lifetime)
        let offline = Self.session(dir, clock, policy: .returnCacheDataDontLoad)
        await #expect(throws: HaulError.self) { _ = try await offline.data(from: url) }
        do { _ = try await offline.data(from: url) } catch { #expect(error.code == .notCached) }
        #expect(server.requests(path: "/p").isEmpty)
        _ = try await Self.session(dir, clock).data(from: url)
        let (kept, _) = try await offline.data(from: url)
        #expect(Array(kept) == TestContent.bytes(count: 100))
        _ = try await Self.session(dir, clock, policy: .returnCacheDataElseLoad).data(from: url)
        #expect(server.requests(path: "/p").count == 1, "stale, but used as it is")
        _ = try await Self.session(dir, clock, policy: .reloadIgnoringLocalCacheData).data(from: url)
        #expect(server.requests(path: "/p").count == 2)
        #expect(server.requests(path: "/p").last?.header("If-None-Match") == nil)
    }

    @Test func credentialsCookiesAndDamagedEntriesAreNotServed() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let clock = Clock()
        let authorized = HaulRequest(
            url: server.url("/a?size=100&cc=max-age=600"), headers: ["Authorization": "Bearer t"])
        for _ in 0..<2 { _ = try await Self.session(dir, clock).data(for: authorized) }
        #expect(server.requests(path: "/a").count == 2)
        #expect(Sys.listDirectory(dir.file("http")).isEmpty)

        _ = try await Self.session(dir, clock).data(from: server.url("/c?size=100&cc=max-age=600&setcookie=s=1"))
        let entry = try #require(Sys.listDirectory(dir.file("http")).first)
        let stored = try #require(try Sys.readSmallFile(dir.file("http/" + entry)))
        #expect(!String(decoding: stored, as: UTF8.self).lowercased().contains("set-cookie"), "no cookie kept")
        // One byte of the body changed: not used, asked again.
        var damaged = stored
        damaged[damaged.count - 1] ^= 0xFF
        try Sys.writeFileAtomically(dir.file("http/" + entry), damaged)
        let (again, _) = try await Self.session(dir, clock).data(
            from: server.url("/c?size=100&cc=max-age=600&setcookie=s=1"))
        #expect(Array(again) == TestContent.bytes(count: 100))
        #expect(server.requests(path: "/c").count == 2)
    }

    @Test func theCacheStaysWithinItsCapacity() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let clock = Clock()
        // 80 KiB: bodies up to 10 KiB kept; ten of 8 KB overflow it.
        let session = Self.session(dir, clock, capacity: 80 << 10)
        for n in 0..<10 {
            _ = try await session.data(from: server.url("/cap\(n)?size=8000&cc=max-age=600"))
            clock.advance(1)
        }
        let sizes = Sys.listDirectory(dir.file("http")).compactMap { try? Sys.status(dir.file("http/" + $0))?.size }
        #expect(sizes.reduce(0, +) <= 80 << 10 && sizes.count < 10 && !sizes.isEmpty)
        _ = try await session.data(from: server.url("/big?size=20000&cc=max-age=600"))
        _ = try await session.data(from: server.url("/big?size=20000&cc=max-age=600"))
        #expect(server.requests(path: "/big").count == 2, "over an eighth of the capacity: not kept")
    }

    @Test func cacheControlIsReadAsRFC9111Says() {
        func cc(_ value: String) -> CacheControl { CacheControl(HTTPHeaders([("Cache-Control", value)])) }
        #expect(cc("max-age=60").maxAge == 60)
        #expect(cc("MAX-AGE=\"30\", no-cache").maxAge == 30 && cc("max-age=30, no-cache").noCache)
        #expect(cc("max-age=abc").maxAge == 0, "invalid: stale")
        #expect(cc("max-age=-5").maxAge == 0 && cc("max-age=").maxAge == 0)
        #expect(cc("max-age=99999999999999999999999").maxAge == 1 << 31, "too large: 2^31")
        #expect(cc("private, no-store").noStore)
        #expect(
            CacheControl(HTTPHeaders([("Cache-Control", "max-age=90"), ("Cache-Control", "max-age=10")])).maxAge == 10)
    }

    @Test func aRequestWithCookiesIsNotAnsweredFromTheCache() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let session = Self.session(dir, Clock())
        _ = try await session.data(from: server.url("/login?size=10&setcookie=id=alice"))
        // `private, max-age` and `Vary: Cookie`: personal, and the cookie is added by the jar.
        let url = server.url("/me?size=100&cc=private,%20max-age=600&vary=Cookie")
        for _ in 0..<2 { _ = try await session.data(from: url) }
        #expect(server.requests(path: "/me").count == 2)
        #expect(server.requests(path: "/me").allSatisfy { $0.header("Cookie") == "id=alice" })
        #expect(Sys.listDirectory(dir.file("http")).count <= 1, "only /login, which had no cookie to send")
    }

    @Test func theRFC9111ArithmeticAndThe304Merge() {
        let request = HTTPHeaders()
        func entry(_ fields: [(String, String)]) -> CachedResponse {
            CachedResponse(
                url: URL(string: "http://h/x")!, decoded: true, finalURL: URL(string: "http://h/x")!, status: 200,
                headers: HTTPHeaders(fields), request: request, requestTime: 1000, responseTime: 1002, body: Data())
        }
        // Expires − Date; the age counts the Date's lag and the Age field.
        let expiring = entry([("Date", HTTPDate.format(990)), ("Expires", HTTPDate.format(1090)), ("Age", "3")])
        #expect(expiring.freshnessLifetime == 100)
        #expect(expiring.age(at: 1002) == 12, "apparent age 12 against corrected 3 + 2")
        #expect(expiring.isFresh(at: 1070, for: CacheControl(request)))
        #expect(!expiring.isFresh(at: 1090, for: CacheControl(request)), "age 12 + 88 reaches the lifetime")
        #expect(entry([("Expires", "not a date")]).freshnessLifetime == 0)
        // An Age past what fits, or two of them: as old as can be.
        #expect(
            !entry([("Cache-Control", "max-age=60"), ("Age", "99999999999999999999")]).isFresh(
                at: 1002, for: CacheControl(request)))
        #expect(
            !entry([("Cache-Control", "max-age=60"), ("Age", "5, 5")]).isFresh(at: 1002, for: CacheControl(request)))
        // A request's no-cache and max-age.
        let fresh = entry([("Cache-Control", "max-age=600")])
        #expect(!fresh.isFresh(at: 1010, for: CacheControl(HTTPHeaders([("Cache-Control", "no-cache")]))))
        #expect(!fresh.isFresh(at: 1010, for: CacheControl(HTTPHeaders([("Cache-Control", "max-age=5")]))))
        // The 304 merge keeps the stored body's coding and Vary, takes the rest.
        let stored = entry([("ETag", "\"a\""), ("Content-Encoding", "gzip"), ("Vary", "Accept"), ("X-A", "1")])
        let refreshed = stored.refreshed(
            by: HTTPHeaders([("Content-Encoding", "br"), ("Vary", "*"), ("X-A", "2"), ("Content-Length", "0")]),
            requestTime: 2000, responseTime: 2001)
        #expect(
            refreshed.responseHeaders["Content-Encoding"] == "gzip" && refreshed.responseHeaders["Vary"] == "Accept")
        #expect(refreshed.responseHeaders["X-A"] == "2" && refreshed.responseTime == 2001)
        #expect(stored.isConfirmed(by: HTTPHeaders([("ETag", "W/\"a\"")])) && stored.isConfirmed(by: HTTPHeaders()))
        #expect(!stored.isConfirmed(by: HTTPHeaders([("ETag", "\"b\"")])))
        #expect(
            !CachedResponse.isStorable(
                status: 200, headers: HTTPHeaders([("Vary", "*"), ("ETag", "\"a\"")]), request: request))
        #expect(!CachedResponse.isStorable(status: 200, headers: HTTPHeaders(), request: request), "nothing to go on")
        #expect(!CachedResponse.isStorable(status: 404, headers: HTTPHeaders([("ETag", "\"a\"")]), request: request))
    }
}
