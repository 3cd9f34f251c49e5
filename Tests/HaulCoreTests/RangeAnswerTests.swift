import Foundation
import HaulTestTraits
import Testing

@testable import HaulCore

/// The one judge of range answers, without a socket: the rules a resume, a segment and a
/// stream's continuation share.
@Suite("Range answers", .fewAtOnce)
struct RangeAnswerTests {
    let strong = RangeAnswer.Version(etag: "\"v1\"", lastModified: nil, total: 1000)
    let dated = RangeAnswer.Version(etag: nil, lastModified: "Tue, 01 Dec 2026 10:00:00 GMT", total: 1000)

    func headers(_ fields: [(String, String)]) -> HTTPHeaders { HTTPHeaders(fields) }

    @Test func aRangeOfTheSameVersionFromTheAskedByteContinues() {
        let answer = headers([("Content-Range", "bytes 500-999/1000"), ("ETag", "\"v1\"")])
        #expect(
            RangeAnswer.check(answer, from: 500, of: strong, totalRequired: true)
                == .continues(.init(etag: "\"v1\"", lastModified: nil, total: 1000)))
    }

    @Test func otherBytesOrAnotherVersionAreRefused() {
        func refused(
            _ fields: [(String, String)], of version: RangeAnswer.Version, totalRequired: Bool = false
        )
            -> Bool
        {
            if case .mismatch = RangeAnswer.check(headers(fields), from: 500, of: version, totalRequired: totalRequired)
            {
                return true
            }
            return false
        }
        #expect(refused([("ETag", "\"v1\"")], of: strong), "no Content-Range")
        #expect(refused([("Content-Range", "bytes 0-999/1000"), ("ETag", "\"v1\"")], of: strong), "another start")
        #expect(refused([("Content-Range", "bytes 500-999/1000"), ("ETag", "\"v2\"")], of: strong), "another ETag")
        #expect(refused([("Content-Range", "bytes 500-999/1000")], of: strong), "a strong ETag not confirmed")
        #expect(refused([("Content-Range", "bytes 500-999/1000"), ("ETag", "W/\"v1\"")], of: strong), "weak")
        #expect(refused([("Content-Range", "bytes 500-1999/2000"), ("ETag", "\"v1\"")], of: strong), "another size")
        #expect(
            refused(
                [("Content-Range", "bytes 500-999/1000"), ("Last-Modified", "Wed, 02 Dec 2026 10:00:00 GMT")],
                of: dated), "another date")
        #expect(refused([("Content-Range", "bytes 500-999/*")], of: dated, totalRequired: true), "no size stated")
        #expect(!refused([("Content-Range", "bytes 500-999/*")], of: dated), "a size not stated is no mismatch")
    }

    @Test func aWeakETagComparesWeakly() {
        let weak = RangeAnswer.Version(etag: "W/\"v1\"", lastModified: nil, total: 1000)
        let same = headers([("Content-Range", "bytes 500-999/1000"), ("ETag", "\"v1\"")])
        let other = headers([("Content-Range", "bytes 500-999/1000"), ("ETag", "W/\"v2\"")])
        if case .continues = RangeAnswer.check(same, from: 500, of: weak, totalRequired: false) {
        } else {
            Issue.record("a weak ETag's opaque tag matched")
        }
        if case .continues = RangeAnswer.check(other, from: 500, of: weak, totalRequired: false) {
            Issue.record("another weak ETag was accepted")
        }
    }

    /// A 200 (or a probe) is the same version only when something confirms it: the same ETag,
    /// or no ETag and the same date, and the same size.
    @Test func theSameVersionNeedsAValidatorAndTheSameSize() {
        #expect(RangeAnswer.isSameVersion(strong, strong))
        #expect(!RangeAnswer.isSameVersion(strong, .init(etag: "\"v2\"", lastModified: nil, total: 1000)))
        #expect(!RangeAnswer.isSameVersion(strong, .init(etag: "\"v1\"", lastModified: nil, total: 999)))
        #expect(RangeAnswer.isSameVersion(dated, dated))
        #expect(
            !RangeAnswer.isSameVersion(dated, .init(etag: "\"new\"", lastModified: dated.lastModified, total: 1000)))
        let bare = RangeAnswer.Version(etag: nil, lastModified: nil, total: 1000)
        #expect(!RangeAnswer.isSameVersion(bare, bare), "nothing to confirm it with")
        let weak = RangeAnswer.Version(etag: "W/\"w\"", lastModified: nil, total: 1000)
        #expect(!RangeAnswer.isSameVersion(weak, weak), "a weak ETag says the meaning is the same, not the bytes")
        let weakDated = RangeAnswer.Version(etag: "W/\"w\"", lastModified: dated.lastModified, total: 1000)
        #expect(RangeAnswer.isSameVersion(weakDated, weakDated), "the date confirms it")
        let probeSeen = RangeAnswer.Version(etag: nil, lastModified: dated.lastModified, total: 1000)
        #expect(!RangeAnswer.isSameVersion(weakDated, probeSeen), "a probe that hides a weak ETag cannot match one")
    }
}

extension RangeAnswerTests {
    /// A probe's answer, judged on its head: a small file whole, a larger one's first range, and
    /// nothing kept from a compressed body, one of unstated length, or a range elsewhere.
    @Test func aProbesAnswerKeepsASmallFileOrTheFirstRange() {
        func judge(_ status: Int, _ fields: [(String, String)]) -> ProbeAnswer {
            ProbeAnswer.judge(status: status, headers: HTTPHeaders(fields), limit: 1000)
        }
        #expect(judge(206, [("Content-Length", "600"), ("Content-Range", "bytes 0-599/600")]) == .whole(length: 600))
        #expect(judge(200, [("Content-Length", "600")]) == .whole(length: 600))
        #expect(judge(200, [("Content-Length", "6000")]) == .nothingToKeep)
        #expect(
            judge(206, [("Content-Length", "1000"), ("Content-Range", "bytes 0-999/50000")])
                == .firstRange)
        #expect(judge(206, [("Content-Length", "1000"), ("Content-Range", "bytes 5-1004/50000")]) == .nothingToKeep)
        #expect(judge(206, [("Content-Length", "900"), ("Content-Range", "bytes 0-899/50000")]) == .nothingToKeep)
        #expect(judge(200, [("Content-Length", "600"), ("Content-Encoding", "gzip")]) == .nothingToKeep)
        #expect(judge(200, []) == .nothingToKeep)
    }
}
