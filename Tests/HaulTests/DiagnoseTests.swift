import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import Haul
@testable import HaulCore

/// `HaulSession.diagnose` (`haul doctor`): each check against a test server that has, or
/// lacks, what it looks for; assertions are on what the server saw and answered, never on speed.
@Suite("diagnose: what a server does with ranges, validators, HEAD and connections", .fewAtOnce)
struct DiagnoseTests {
    /// Checks only (no speed measurement, which takes seconds and whose findings depend on it).
    static var quick: DiagnosisOptions {
        var o = DiagnosisOptions()
        o.speedSeconds = 0
        o.maxConnections = 3
        return o
    }

    static func diagnose(
        _ server: TestServer, _ target: String, _ options: DiagnosisOptions = quick
    )
        async throws -> Diagnosis
    {
        try await testSession().diagnose(server.url(target), options: options)
    }

    @Test func aServerThatDoesEverythingRightHasNoFindings() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        let d = try await Self.diagnose(server, "/good?size=1048576")
        #expect(d.findings == [], "\(d.findings)")
        #expect(d.hops.map(\.status) == [200])
        #expect(d.answer.length == 1_048_576)
        #expect(d.connection.httpVersion == "HTTP/1.1")
        #expect(d.connection.tlsVersion == nil && d.connection.certificateExpires == nil)
        #expect(d.validators.etag == "\"s1-v0-1048576\"" && d.validators.stable == true && !d.validators.weakETag)
        #expect(d.ranges.support == .honoured, "\(d.ranges.detail)")
        #expect(d.head?.agrees == true && d.head?.status == 200)
        #expect(d.gzipOnRanges == false)
        #expect(d.connections?.admitted == 3 && d.connections?.tried == 3 && d.connections?.refusal == nil)
        #expect(d.speeds.isEmpty)
        // What the server saw: the two small ranges inside the first 64 KiB, one HEAD, one
        // range offered gzip, and three plain GETs held at once besides the two of the start.
        let seen = server.requests(path: "/good")
        let ranges = seen.compactMap(\.range)
        #expect(ranges == ["bytes=0-511", "bytes=32768-33279", "bytes=0-1023"], "\(ranges)")
        #expect(seen.filter { $0.header("Accept-Encoding") == "gzip" }.map(\.range) == ["bytes=0-1023"])
        #expect(seen.filter { $0.method == "HEAD" }.count == 1)
        #expect(seen.filter { $0.method == "GET" && $0.range == nil }.count == 5)
    }

    @Test func aServerThatIgnoresRangeIsFoundOutAndNotSplit() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        var options = Self.quick
        options.speedSeconds = 5  // the file ends first
        let d = try await Self.diagnose(server, "/noranges?size=300000&ranges=0", options)
        #expect(d.ranges.support == .ignored)
        #expect(d.findings.contains { $0.hasPrefix("the server ignores Range") }, "\(d.findings)")
        #expect(d.gzipOnRanges == nil)
        // One connection measured; no split without ranges.
        #expect(d.speeds.map(\.connections) == [1])
        #expect(d.speeds[0].bytes > 0 && d.speeds[0].bytes <= 300_000)
    }

    @Test func rangesWithOtherBytesThanTheWholeFileAreWrong() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        // A new version at every request: its ranges are not the bytes of the first answer,
        // and its validators change.
        let d = try await Self.diagnose(server, "/changing?size=100000&change=always")
        #expect(d.ranges.support == .wrongBytes, "\(d.ranges.detail)")
        #expect(d.validators.stable == false)
        #expect(d.validators.etag != d.validators.secondETag)
        #expect(d.findings.contains { $0.hasPrefix("the validators changed between two requests") }, "\(d.findings)")
        #expect(d.findings.contains { $0.hasPrefix("the server's ranges are wrong") }, "\(d.findings)")
    }

    @Test func missingAndWeakValidatorsAreFindings() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        let none = try await Self.diagnose(server, "/none?size=5000&etag=0&lm=0")
        #expect(none.validators.stable == nil)
        #expect(none.findings.contains { $0.hasPrefix("no ETag or Last-Modified") }, "\(none.findings)")
        let weak = try await Self.diagnose(server, "/weak?size=5000&weak=1&lm=0")
        #expect(weak.validators.weakETag && weak.validators.stable == true)
        #expect(weak.findings.contains { $0.hasPrefix("only a weak ETag") }, "\(weak.findings)")
    }

    @Test func aHeadThatDisagreesWithGetIsAFinding() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        let d = try await Self.diagnose(server, "/head?size=5000&headlength=99")
        #expect(d.head?.length == 99 && d.head?.agrees == false)
        #expect(
            d.findings.contains { $0.hasPrefix("HEAD and GET disagree (length 99 against 5000)") }, "\(d.findings)")
    }

    @Test func gzipOnTheWireIsNamed() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        let d = try await Self.diagnose(server, "/gz?size=20000&gzip=1")
        #expect(d.answer.contentEncoding == "gzip")
        #expect(d.gzipOnRanges == true)
        #expect(d.findings.contains { $0.hasPrefix("the server sends Content-Encoding gzip") }, "\(d.findings)")
    }

    @Test func theRedirectChainIsListedWithoutItsQueries() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        let d = try await Self.diagnose(server, "/r?size=5000&redirect=2")
        #expect(d.hops.map(\.status) == [303, 302, 200], "\(d.hops)")
        #expect(d.hops[0].url == server.url("/r?size=5000&redirect=2").absoluteString)
        // Past the first hop, without the query (a signed link's signature stays out of it).
        #expect(d.hops.dropFirst().allSatisfy { $0.url == server.url("/r").absoluteString + "?…" }, "\(d.hops)")
        #expect(d.ranges.support == .honoured)
        #expect(server.requests(path: "/r").filter { $0.method == "HEAD" }.map(\.target) == ["/r?size=5000&redirect=0"])
    }

    @Test func theConnectionCountStopsAtTheFirstRefusal() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        var options = Self.quick
        options.maxConnections = 8
        // busy=3: a fourth request in flight gets 503. Answers paced after their first 70 KB
        // stay in flight while held; the checks before the count may still be leaving, so the
        // count is at most 3.
        let d = try await Self.diagnose(server, "/busy?size=4000000&busy=3&burst=70000&rate=2000", options)
        let c = try #require(d.connections)
        #expect((1...3).contains(c.admitted), "\(c)")
        #expect(c.tried == c.admitted + 1)
        #expect(c.refusal == "connection \(c.tried): HTTP 503 Service Unavailable", "\(c)")
        #expect(c.ended == 0)
        #expect(d.findings.contains { $0.hasPrefix("the server admits \(c.admitted) connection") }, "\(d.findings)")
    }

    @Test func aTricklingServerIsCutAtTheBodysDeadlineAndStillDiagnosed() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        // 64 KiB at 3000 bytes/s would take 22 s; the first answer is cut 2 s after its head
        // and the checks go on with what came.
        var options = Self.quick
        options.requestSeconds = 2
        let d = try await Self.diagnose(server, "/trickle?size=200000&rate=3000", options)
        #expect(d.answer.status == 200)
        #expect(d.ranges.support == .honoured, "\(d.ranges.detail)")
        let ranges = server.requests(path: "/trickle").compactMap(\.range)
        #expect(ranges.count == 3 && ranges[0] == "bytes=0-511", "\(ranges)")
        // The second range is from the middle of what came: under 64 KiB.
        #expect(ranges[1] != "bytes=32768-33279", "\(ranges)")
    }

    @Test func aLengthNearInt64MaxIsSplitWithoutOverflow() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        var options = Self.quick
        options.speedSeconds = 5  // the answers end first: the server has 100000 bytes
        // Content-Length 9223372036854775807 for a file of 100000 bytes, cut short.
        let d = try await Self.diagnose(server, "/lie?size=100000&lie=9223372036854675807", options)
        #expect(d.answer.length == Int64.max)
        #expect(d.ranges.support == .honoured, "\(d.ranges.detail)")
        #expect(d.speeds.map(\.connections) == [1, 4])
        let part = Int64.max / 4
        let ranges = Set(server.requests(path: "/lie").compactMap(\.range))
        #expect(ranges.contains("bytes=\(part * 3)-\(Int64.max - 1)"), "\(ranges)")
    }

    @Test func theSessionsConnectionCapBoundsTheCount() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        var options = Self.quick
        options.maxConnections = 8
        let session = testSession { $0.maxConnectionsPerHost = 2 }
        let d = try await session.diagnose(server.url("/capped?size=4000000&burst=70000&rate=2000"), options: options)
        #expect(d.connections?.tried == 2 && d.connections?.admitted == 2, "\(String(describing: d.connections))")
    }

    @Test func speedIsMeasuredOnOneAndOnFourRanges() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        var options = Self.quick
        options.speedSeconds = 5  // the file ends first
        let d = try await Self.diagnose(server, "/speed?size=4000000", options)
        #expect(d.speeds.map(\.connections) == [1, 4])
        #expect(d.speeds.allSatisfy { $0.bytes > 0 && $0.seconds > 0 && $0.bytesPerSecond > 0 }, "\(d.speeds)")
        // The four ranges split the file.
        let quarters = ["bytes=0-999999", "bytes=1000000-1999999", "bytes=2000000-2999999", "bytes=3000000-3999999"]
        let ranges = Set(server.requests(path: "/speed").compactMap(\.range))
        #expect(ranges.isSuperset(of: quarters), "\(ranges)")
    }

    @Test func anErrorStatusIsADiagnosisWithNothingElseAsked() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        let d = try await Self.diagnose(server, "/missing?status=404")
        #expect(d.answer.status == 404)
        #expect(d.findings == ["the server answers HTTP 404 Not Found: there is nothing to download"])
        #expect(d.head == nil && d.connections == nil && d.ranges.support == .untested)
        #expect(server.requests(path: "/missing").count == 1)
    }

    @Test func aServerThatIsNotThereIsAnError() async throws {
        let port = try RefusingPort()
        let error = await #expect(throws: HaulError.self) {
            try await testSession().diagnose(port.url("/f"), options: Self.quick)
        }
        #expect(error?.code == .network, "\(String(describing: error))")
    }

    @Test func certificateExpiryIsReadAsISO8601() {
        #expect(HTTPDate.iso8601(0) == "1970-01-01T00:00:00Z")
        #expect(HTTPDate.iso8601(1_767_225_600) == "2026-01-01T00:00:00Z")
        // OpenSSL's form and GnuTLS's, as libcurl's certificate info gives them.
        #expect(
            HTTPDate.parseCertificateDate("Mar  1 12:00:00 2027 GMT").map(HTTPDate.iso8601) == "2027-03-01T12:00:00Z")
        #expect(
            HTTPDate.parseCertificateDate("2027-03-01 12:00:00 GMT").map(HTTPDate.iso8601) == "2027-03-01T12:00:00Z")
        for bad in [
            "2027-13-01 12:00:00 GMT", "2027-02-30 12:00:00 GMT", "2027-03-01 24:00:00 GMT",
            "2027-03-01 12:00:00 +0100",
            "2027-03-01 12:00:00junk", "soon", "",
        ] {
            #expect(HTTPDate.parseCertificateDate(bad) == nil, "\(bad)")
        }
    }

    @Test func daysLeftRoundDownSoAnHourPastExpiryIsExpired() throws {
        let expiry = try #require(HTTPDate.parseCertificateDate("2027-03-01 12:00:00 GMT"))
        func left(_ now: Int64) -> Int? {
            Doctor.connection(ConnectionReport(certificateExpiry: "2027-03-01 12:00:00 GMT"), now: now)
                .certificateDaysLeft
        }
        #expect(left(expiry - 3600) == 0)
        #expect(left(expiry + 3600) == -1)
        #expect(left(expiry - 2 * 86400 - 1) == 2)
        #expect(left(expiry + 86400) == -1 && left(expiry + 86401) == -2)
        var expired = try Self.diagnosis()
        expired.connection.certificateDaysLeft = -1
        #expect(Doctor.findings(expired).contains("the server's certificate expired 1 day ago"))
        expired.connection.certificateDaysLeft = 0
        #expect(Doctor.findings(expired).contains("the server's certificate expires within a day"))
    }

    /// A diagnosis with nothing wrong, to change one thing in.
    static func diagnosis() throws -> Diagnosis {
        let json = """
            {"url":"http://h/f","hops":[{"status":200,"url":"http://h/f"}],"connection":{},
            "answer":{"status":200,"length":1000,"contentType":"text/plain"},
            "validators":{"etag":"\\"a\\"","weakETag":false,"stable":true},
            "ranges":{"support":"honoured","detail":"-"},"speeds":[],"findings":[]}
            """
        let d = try JSONDecoder().decode(Diagnosis.self, from: Data(json.utf8))
        #expect(Doctor.findings(d) == [])
        return d
    }

    @Test func aRedirectToPlainHTTPIsFoundWhateverTheCaseOfItsScheme() throws {
        var d = try Self.diagnosis()
        d.hops = [Diagnosis.Hop(status: 301, url: "HTTPS://h/f"), Diagnosis.Hop(status: 200, url: "Http://h/f")]
        #expect(
            Doctor.findings(d).contains { $0.hasPrefix("a redirect leaves https for plain http") },
            "\(Doctor.findings(d))")
    }

    @Test func headAgreesWhenItLeavesOutTheLengthOrSpellsTheTypeOtherwise() {
        let get = Diagnosis.Answer(status: 200, length: nil, contentType: "text/html; charset=utf-8")
        #expect(Doctor.agree(Diagnosis.HeadCheck(status: 200, length: 100, contentType: "Text/HTML"), get))
        var known = get
        known.length = 100
        #expect(Doctor.agree(Diagnosis.HeadCheck(status: 200, length: nil, contentType: "text/html"), known))
        #expect(!Doctor.agree(Diagnosis.HeadCheck(status: 200, length: 99, contentType: "text/html"), known))
        #expect(!Doctor.agree(Diagnosis.HeadCheck(status: 200, length: 100, contentType: "text/plain"), known))
        #expect(!Doctor.agree(Diagnosis.HeadCheck(status: 404, length: 100, contentType: "text/html"), known))
    }

    @Test func aServerThatHoldsItsHeadIsCutAtTheDeadlineWithoutAnIdleTimeout() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        var options = Self.quick
        options.requestSeconds = 0.5
        let session = testSession {
            $0.timeout.idle = 0  // none: only the diagnosis's own deadline ends the wait
            $0.timeout.connect = 1
        }
        let error = await #expect(throws: HaulError.self) {
            try await session.diagnose(server.url("/held?size=1000&delay=6"), options: options)
        }
        #expect(error?.code == .timeout, "\(String(describing: error))")
        #expect(error?.message == "no answer from 127.0.0.1 within 1.5 s", "\(String(describing: error))")
    }

    @Test func aFirstAnswerThatBreaksOffIsSaidSoNotCalledShort() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        let d = try await Self.diagnose(server, "/broken?size=100000&drop=1&drops=1")
        #expect(d.answer.bodyError?.hasPrefix("after 1 byte: ") == true, "\(String(describing: d.answer.bodyError))")
        #expect(d.ranges.support == .untested && d.ranges.detail.hasPrefix("the answer broke off after 1 byte ("))
        #expect(d.findings.contains { $0.hasPrefix("the answer broke off (after 1 byte: ") }, "\(d.findings)")
    }

    @Test func optionsAreClampedToTheirRangesAndTheSessionsCap() {
        var o = DiagnosisOptions()
        o.maxConnections = 1000
        o.speedConnections = 99
        o.speedSeconds = .infinity
        o.requestSeconds = .nan
        var c = o.clamped(maxConnectionsPerHost: nil)
        #expect(c.maxConnections == 64 && c.speedConnections == 16 && c.speedSeconds == 600 && c.requestSeconds == 10)
        c = o.clamped(maxConnectionsPerHost: 3)
        #expect(c.maxConnections == 3 && c.speedConnections == 3)
        o.maxConnections = -5
        o.speedConnections = 0
        for seconds in [-1, Double.nan, 0] {
            o.speedSeconds = seconds
            c = o.clamped(maxConnectionsPerHost: 0)
            #expect(c.maxConnections == 0 && c.speedConnections == 1 && c.speedSeconds == 0, "\(seconds)")
        }
    }

    @Test func aConnectionWhoseHeadIsHeldIsTheRefusal() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        var options = Self.quick
        options.maxConnections = 8
        options.requestSeconds = 0.5
        let session = testSession { $0.timeout.connect = 1 }
        // Requests 0-5 are the checks before the count (two GETs, HEAD, three ranges); the
        // count's first two are answered (paced, so they stay open), the third is held 6 s.
        let target = "/heldlater?size=4000000&burst=70000&rate=2000&delay=6&delayfrom=8"
        let d = try await session.diagnose(server.url(target), options: options)
        let c = try #require(d.connections)
        #expect(c.admitted == 2 && c.tried == 3, "\(c)")
        #expect(c.refusal == "connection 3: no answer from 127.0.0.1 within 1.5 s", "\(c)")
    }

    @Test(arguments: [Double.infinity, .nan, -1, 1e300])
    func anyNumberOfSpeedSecondsIsTakenWithoutATrap(seconds: Double) async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        var options = Self.quick
        options.speedSeconds = seconds
        options.maxConnections = 0
        let d = try await Self.diagnose(server, "/small?size=1000", options)  // it ends first
        #expect(d.speeds.count == (seconds > 0 ? 2 : 0), "\(d.speeds)")
        #expect(d.speeds.allSatisfy { $0.seconds <= 600 && $0.bytes > 0 }, "\(d.speeds)")
    }

    @Test func theSessionsConnectionCapBoundsTheSpeedConnections() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        var options = Self.quick
        options.speedSeconds = 5  // the file ends first
        let session = testSession { $0.maxConnectionsPerHost = 2 }
        let d = try await session.diagnose(server.url("/capspeed?size=400000"), options: options)
        #expect(d.speeds.map(\.connections) == [1, 2])
        let ranges = Set(server.requests(path: "/capspeed").compactMap(\.range))
        #expect(ranges.isSuperset(of: ["bytes=0-199999", "bytes=200000-399999"]), "\(ranges)")
    }
}
