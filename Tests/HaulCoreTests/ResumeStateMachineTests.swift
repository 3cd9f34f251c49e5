import Foundation
import HaulTestTraits
import Testing

@testable import HaulCore

@Suite("Resume decisions (no I/O)", .fewAtOnce)
struct ResumeStateMachineTests {
    let url = URL(string: "http://example.test/file.bin")!

    func record(
        bytes: Int64, etag: String? = "\"v1\"", lastModified: String? = "Thu, 01 Jan 2026 00:00:00 GMT",
        total: Int64? = 1000
    ) -> ResumeRecord {
        ResumeRecord(
            url: url.absoluteString, etag: etag, lastModified: lastModified, totalLength: total,
            ranges: bytes > 0 ? [ByteRange(0, bytes)] : [])
    }

    func headers(_ pairs: [(String, String)]) -> HTTPHeaders { HTTPHeaders(pairs) }

    @Test func freshDownloadAsksForNoRangeAndWritesFromZero() {
        let m = ResumeStateMachine(record: nil)
        #expect(m.resumeHeaders().isEmpty)
        let action = m.responseReceived(
            status: 200, headers: headers([("Content-Length", "1000"), ("ETag", "\"v1\"")]), url: url)
        #expect(
            action
                == .write(
                    offset: 0, discardExisting: false,
                    validators: .init(etag: "\"v1\"", lastModified: nil, totalLength: 1000)))
    }

    @Test func resumeSendsRangeAndStrongETagAsIfRange() {
        let m = ResumeStateMachine(record: record(bytes: 400))
        let h = Dictionary(uniqueKeysWithValues: m.resumeHeaders())
        #expect(h["Range"] == "bytes=400-")
        #expect(h["If-Range"] == "\"v1\"")
    }

    @Test func weakETagFallsBackToLastModifiedForIfRange() {
        let m = ResumeStateMachine(record: record(bytes: 400, etag: "W/\"v1\""))
        let h = Dictionary(uniqueKeysWithValues: m.resumeHeaders())
        #expect(h["If-Range"] == "Thu, 01 Jan 2026 00:00:00 GMT")
    }

    @Test func matching206ContinuesAtTheOffset() {
        let m = ResumeStateMachine(record: record(bytes: 400))
        let action = m.responseReceived(
            status: 206, headers: headers([("Content-Range", "bytes 400-999/1000"), ("ETag", "\"v1\"")]), url: url)
        guard case .write(let offset, let discard, let v) = action else {
            Issue.record("expected write, got \(action)")
            return
        }
        #expect(offset == 400 && !discard && v.totalLength == 1000)
    }

    /// A 206 must carry the strong ETag sent as If-Range (RFC 9110 15.3.7: a 206 has the ETag a
    /// 200 would have); without it nothing says which version the bytes come from.
    @Test func a206WithoutTheETagItWasAskedForRestarts() {
        let m = ResumeStateMachine(record: record(bytes: 400))
        let action = m.responseReceived(
            status: 206, headers: headers([("Content-Range", "bytes 400-999/1000")]), url: url)
        guard case .restart(let reason) = action else {
            Issue.record("expected restart, got \(action)")
            return
        }
        #expect(reason.contains("ETag"))
    }

    /// With a weak ETag the If-Range is the date, which a 206 need not repeat.
    @Test func a206WithoutAnETagContinuesWhenTheIfRangeWasADate() {
        let m = ResumeStateMachine(record: record(bytes: 400, etag: "W/\"v1\""))
        let action = m.responseReceived(
            status: 206, headers: headers([("Content-Range", "bytes 400-999/1000")]), url: url)
        guard case .write(400, false, _) = action else {
            Issue.record("expected write at 400, got \(action)")
            return
        }
    }

    @Test func status200WhileResumingDiscardsThePartial() {
        let m = ResumeStateMachine(record: record(bytes: 400))
        let action = m.responseReceived(status: 200, headers: headers([("Content-Length", "1000")]), url: url)
        guard case .write(0, true, _) = action else {
            Issue.record("expected write from zero with discard, got \(action)")
            return
        }
    }

    @Test(arguments: [
        ("bytes 300-999/1000", "\"v1\"", "asked for 400"),
        ("bytes 400-999/1000", "\"v2\"", "ETag"),
        ("bytes 400-1999/2000", "\"v1\"", "size"),
        ("garbage", "\"v1\"", "Content-Range"),
    ])
    func mismatching206Restarts(contentRange: String, etag: String, reasonMentions: String) {
        let m = ResumeStateMachine(record: record(bytes: 400))
        let action = m.responseReceived(
            status: 206, headers: headers([("Content-Range", contentRange), ("ETag", etag)]), url: url)
        guard case .restart(let reason) = action else {
            Issue.record("expected restart, got \(action)")
            return
        }
        #expect(reason.contains(reasonMentions))
    }

    /// Without a validator the range starts 64 KiB before the offset (those bytes are compared
    /// with the disk by the engine), and the total must match.
    @Test func unvalidatedPartialAsksForAnOverlapAndResumesOnlyWhenTheLengthMatches() {
        let m = ResumeStateMachine(record: record(bytes: 100_000, etag: nil, lastModified: nil, total: 200_000))
        #expect(m.record?.validated == false)
        #expect(m.resumeHeaders().map { "\($0.0): \($0.1)" } == ["Range: bytes=34464-"])
        #expect(m.requestOffset == 34_464 && m.overlapBytes == 65_536)
        let same = m.responseReceived(
            status: 206, headers: headers([("Content-Range", "bytes 34464-199999/200000")]), url: url)
        guard case .write(100_000, false, _) = same else {
            Issue.record("expected write at the resume offset, got \(same)")
            return
        }
        let atTheOffset = m.responseReceived(
            status: 206, headers: headers([("Content-Range", "bytes 100000-199999/200000")]), url: url)
        guard case .restart = atTheOffset else {
            Issue.record("expected restart, got \(atTheOffset)")
            return
        }
        let unknown = m.responseReceived(
            status: 206, headers: headers([("Content-Range", "bytes 34464-199999/*")]), url: url)
        guard case .restart = unknown else {
            Issue.record("expected restart, got \(unknown)")
            return
        }
        // A partial shorter than the overlap is asked again from its start.
        let short = ResumeStateMachine(record: record(bytes: 400, etag: nil, lastModified: nil, total: 1000))
        #expect(short.requestOffset == 0 && short.overlapBytes == 400)
        // With a validator there is no overlap.
        #expect(ResumeStateMachine(record: record(bytes: 100_000, total: 200_000)).overlapBytes == 0)
    }

    @Test func unvalidatedPartialWithUnknownTotalNeverResumes() {
        let m = ResumeStateMachine(record: record(bytes: 400, etag: nil, lastModified: nil, total: nil))
        let action = m.responseReceived(
            status: 206, headers: headers([("Content-Range", "bytes 400-999/1000")]), url: url)
        guard case .restart = action else {
            Issue.record("expected restart, got \(action)")
            return
        }
    }

    @Test func status416WithTheWholeFileOnDiskIsComplete() {
        let m = ResumeStateMachine(record: record(bytes: 1000))
        #expect(
            m.responseReceived(status: 416, headers: headers([("Content-Range", "bytes */1000")]), url: url)
                == .alreadyComplete)
        let other = m.responseReceived(status: 416, headers: headers([("Content-Range", "bytes */2000")]), url: url)
        guard case .restart = other else {
            Issue.record("a different size must restart, got \(other)")
            return
        }
        let partial = ResumeStateMachine(record: record(bytes: 500))
        guard case .restart = partial.responseReceived(status: 416, headers: HTTPHeaders(), url: url) else {
            Issue.record("416 with a partial file must restart")
            return
        }
    }

    @Test func transientStatusesRetryWithRetryAfter() {
        let m = ResumeStateMachine(record: nil)
        for status in [408, 429, 500, 502, 503, 504] {
            let action = m.responseReceived(status: status, headers: headers([("Retry-After", "7")]), url: url)
            guard case .retry(let error) = action else {
                Issue.record("\(status) should retry, got \(action)")
                continue
            }
            #expect(error.httpStatus == status && error.retryAfter == 7)
        }
    }

    @Test func permanentStatusesFailWithTheStatusInTheMessage() {
        let m = ResumeStateMachine(record: nil)
        for status in [400, 401, 403, 404, 410] {
            guard case .fail(let error) = m.responseReceived(status: status, headers: HTTPHeaders(), url: url) else {
                Issue.record("\(status) should fail")
                continue
            }
            #expect(error.code == .httpStatus && error.message.contains("HTTP \(status)"))
        }
    }

    @Test func redirectsResolveRelativeLocations() {
        let m = ResumeStateMachine(record: nil)
        let action = m.responseReceived(status: 302, headers: headers([("Location", "/other/x.bin?a=1")]), url: url)
        #expect(action == .redirect(URL(string: "http://example.test/other/x.bin?a=1")!))
        guard case .fail = m.responseReceived(status: 302, headers: HTTPHeaders(), url: url) else {
            Issue.record("a redirect without Location must fail")
            return
        }
    }

    @Test func unaskedFor206IsInvalid() {
        let m = ResumeStateMachine(record: nil)
        guard case .fail(let e) = m.responseReceived(status: 206, headers: HTTPHeaders(), url: url) else {
            Issue.record("expected fail")
            return
        }
        #expect(e.code == .invalidResponse)
    }

    @Test func acceptAndAdvanceKeepTheRecordHonest() {
        var m = ResumeStateMachine(record: nil)
        let secretURL = URL(string: "http://user:secret@example.test/file.bin")!
        m.accept(
            offset: 0, validators: .init(etag: "\"e\"", lastModified: nil, totalLength: 10), url: secretURL,
            finalURL: secretURL)
        m.advance(to: 6)
        #expect(m.resumeOffset == 6)
        #expect(m.record?.url == "http://example.test/file.bin")
        #expect(!(String(decoding: m.record!.encoded(), as: UTF8.self).contains("secret")))
    }

    /// A redirect to a storage service's pre-signed link carries its signature (and the key's id)
    /// in the query: the record, which only shows where the download went, keeps neither.
    @Test func theRecordKeepsNoSignedLinksQuery() {
        var m = ResumeStateMachine(record: nil)
        let signed = URL(
            string: "https://objects.example.test/b/file.bin?X-Amz-Credential=AKIDEXAMPLE&X-Amz-Signature=abc123#x")!
        m.accept(
            offset: 0, validators: .init(etag: "\"e\"", lastModified: nil, totalLength: 10),
            url: URL(string: "https://example.test/file.bin?token=mine")!, finalURL: signed)
        #expect(m.record?.finalURL == "https://objects.example.test/b/file.bin")
        #expect(m.record?.url == "https://example.test/file.bin?token=mine", "the URL asked for is the record's key")
        let text = String(decoding: m.record!.encoded(), as: UTF8.self)
        #expect(!text.contains("AKIDEXAMPLE") && !text.contains("abc123"))
    }

    /// Messages name the URL asked for as given (without user name and password) and a redirect
    /// target without its query: a 403 from a pre-signed link must not print its signature.
    @Test func messagesNameARedirectTargetWithoutItsQuery() {
        let origin = URL(string: "https://alice:pw@example.test/file.bin?token=mine")!
        let signed = URL(string: "https://objects.example.test/b/file.bin?X-Amz-Signature=abc123#x")!
        #expect(ResumeRecord.shown(origin, origin: origin) == "https://example.test/file.bin?token=mine")
        #expect(ResumeRecord.shown(signed, origin: origin) == "https://objects.example.test/b/file.bin?…")
        let plain = URL(string: "https://mirror.example.test/file.bin")!
        #expect(ResumeRecord.shown(plain, origin: origin) == "https://mirror.example.test/file.bin")

        let m = ResumeStateMachine(record: nil, origin: origin)
        guard case .fail(let error) = m.responseReceived(status: 403, headers: HTTPHeaders(), url: signed) else {
            Issue.record("a 403 fails")
            return
        }
        #expect(error.message == "HTTP 403 Forbidden from https://objects.example.test/b/file.bin?…")
    }
}

extension ResumeStateMachineTests {
    /// A weak ETag alone cannot be sent as If-Range, and says two bodies mean the same, not that
    /// their bytes are: such a partial resumes as one without a validator (an overlap compared,
    /// the total confirmed), and a 206 that states no total is refused.
    @Test func aWeakETagAloneIsNoValidator() {
        let m = ResumeStateMachine(record: record(bytes: 100_000, etag: "W/\"a\"", lastModified: nil, total: 200_000))
        #expect(m.resumeHeaders().map { "\($0.0): \($0.1)" } == ["Range: bytes=34464-"])
        let unsized = headers([("Content-Range", "bytes 34464-199999/*")])
        guard case .restart = m.responseReceived(status: 206, headers: unsized, url: url) else {
            Issue.record("a 206 of unconfirmed size continued a weak-ETag partial")
            return
        }
        let sized = headers([("Content-Range", "bytes 34464-199999/200000")])
        guard case .write(100_000, false, _) = m.responseReceived(status: 206, headers: sized, url: url) else {
            Issue.record("a 206 of the same size was refused")
            return
        }
    }
}
