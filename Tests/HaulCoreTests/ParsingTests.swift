import Foundation
import HaulTestTraits
import Testing

@testable import HaulCore

@Suite("Header parsing, safe names, retry policy, records, SHA-256", .fewAtOnce)
struct ParsingTests {
    @Test func contentRange() {
        #expect(HTTPParsing.contentRange("bytes 0-99/1000") == .init(start: 0, end: 99, total: 1000))
        #expect(HTTPParsing.contentRange("bytes 5-9/*") == .init(start: 5, end: 9, total: nil))
        #expect(HTTPParsing.contentRange("bytes */1000") == .init(start: nil, end: nil, total: 1000))
        #expect(HTTPParsing.contentRange("bytes 9-5/1000") == nil)
        #expect(HTTPParsing.contentRange("bytes 0-1000/1000") == nil)
        #expect(HTTPParsing.contentRange("items 0-1/2") == nil)
        // Case, spaces around the value and after `bytes`; nothing else bends.
        #expect(HTTPParsing.contentRange(" BYTES   0-9/10\t") == .init(start: 0, end: 9, total: 10))
        #expect(HTTPParsing.contentRange("bytes 0-9/10/20") == nil)
        #expect(HTTPParsing.contentRange("bytes 0-4-9/10") == nil)
        #expect(HTTPParsing.contentRange("bytes +0-9/10") == nil)
        #expect(HTTPParsing.contentRange("bytes 0-9/") == nil)
        #expect(HTTPParsing.contentRange("bytes") == nil)
        #expect(HTTPParsing.contentRange("bytes\t0-9/10") == nil)
        #expect(HTTPParsing.contentRange("byt\u{E9}s 0-9/10") == nil)
        #expect(HTTPParsing.contentRange("bytes 0-9 /10") == nil)
        #expect(HTTPParsing.contentRange("Bytes 0-9/10\r\n") == .init(start: 0, end: 9, total: 10))
        #expect(HTTPParsing.contentRange("bytes -9/10") == nil)
        #expect(HTTPParsing.contentRange("bytes */*") == .init(start: nil, end: nil, total: nil))
        #expect(HTTPParsing.contentRange("bytes *\u{301}/10") == nil)
        #expect(HTTPParsing.contentRange("bytes 0-9/9223372036854775808") == nil)  // past Int64
        #expect(
            HTTPParsing.contentRange("bytes 0-9/9223372036854775807")
                == .init(start: 0, end: 9, total: 9_223_372_036_854_775_807))
    }

    @Test func contentLengthProblems() {
        #expect(HTTPHeaders([("Content-Length", "5")]).contentLengthProblem == nil)
        #expect(HTTPHeaders([("Content-Length", "5"), ("content-length", "5")]).contentLengthProblem == nil)
        #expect(HTTPHeaders([("Content-Length", " 5 ")]).contentLengthProblem == nil)
        #expect(HTTPHeaders([]).contentLengthProblem == nil)
        #expect(HTTPHeaders([("Content-Length", "0x25")]).contentLengthProblem?.contains("not a number") == true)
        #expect(HTTPHeaders([("Content-Length", "5"), ("Content-Length", "-5")]).contentLengthProblem != nil)
        #expect(HTTPHeaders([("Content-Length", "5, 7")]).contentLengthProblem?.contains("conflicting") == true)
        #expect(HTTPHeaders([("Content-Length", "5"), ("Content-Length", "7")]).contentLengthProblem != nil)
    }

    @Test func conflictingContentLengths() {
        #expect(HTTPHeaders([("Content-Length", "5")]).conflictingContentLengths == nil)
        // The same number twice is one length (RFC 9112 6.3 lets a recipient accept it).
        #expect(HTTPHeaders([("Content-Length", "5"), ("content-length", "5")]).conflictingContentLengths == nil)
        #expect(HTTPHeaders([("Content-Length", "5, 5")]).conflictingContentLengths == nil)
        #expect(
            HTTPHeaders([("Content-Length", "5"), ("Content-Length", "7")]).conflictingContentLengths == ["5", "7"])
        #expect(HTTPHeaders([("Content-Length", "5 ,7")]).conflictingContentLengths == ["5", "7"])
    }

    @Test func retryAfterSecondsAndDates() {
        #expect(HTTPParsing.retryAfter("120") == 120)
        let now = Date(timeIntervalSince1970: 1_767_225_600)
        #expect(HTTPParsing.retryAfter("Thu, 01 Jan 2026 00:00:30 GMT", now: now) == 30)
        #expect(HTTPParsing.retryAfter("Wed, 31 Dec 2025 00:00:00 GMT", now: now) == 0)
        #expect(HTTPParsing.retryAfter("soon") == nil)
    }

    @Test(arguments: [
        ("attachment; filename=\"report.pdf\"", "report.pdf"),
        ("attachment; filename=plain.txt", "plain.txt"),
        ("attachment; filename=\"a;b.txt\"", "a;b.txt"),
        ("attachment; filename=\"my \\\"quoted\\\" file.txt\"", "my \"quoted\" file.txt"),
        ("attachment; filename=\"fallback.txt\"; filename*=UTF-8''na%C3%AFve%20caf%C3%A9.txt", "naïve café.txt"),
        ("attachment; filename*=iso-8859-1'en'%E9t%E9.txt", "été.txt"),
    ])
    func contentDisposition(header: String, name: String) {
        #expect(HTTPParsing.contentDispositionFilename(header) == name)
    }

    @Test(
        arguments: [
            ("../../evil.txt", "evil.txt"),
            ("/etc/passwd", "passwd"),
            ("a/b\\c/inner.txt", "inner.txt"),
            ("nul\u{0}name\n.txt", "nulname.txt"),
            ("..", nil),
            (".hidden", "hidden"),
            ("-rf", "rf"),
            ("", nil),
            // A "/" or "\\" followed by a combining mark is one Character, and still a separator.
            ("sub/\u{301}x.txt", "\u{301}x.txt"),
            ("sub\\\u{301}x.txt", "\u{301}x.txt"),
            ("a/\u{301}/\u{301}b", "\u{301}b"),
            (".\u{301}hidden", "\u{301}hidden"),
            ("-\u{301}rf", "\u{301}rf"),
            ("..\u{301}", "\u{301}"),
            // Around the one-pass check for a name kept as it is: names it keeps, and names that
            // fail one of its tests.
            (" a.txt", "a.txt"), ("a.txt ", "a.txt"), ("a b.txt", "a b.txt"), ("a\u{7F}b", "ab"),
            ("tab\there", "tabhere"), ("caf\u{E9}", "caf\u{E9}"), ("x.PART", "x.PART_"), ("a.b", "a.b"),
            (String(repeating: "n", count: 200), String(repeating: "n", count: 200)),
            (String(repeating: "n", count: 201), String(repeating: "n", count: 200)),
            // Bidi controls go (a right-to-left override shows "evil\u{202E}fdp.exe" as
            // "evilexe.pdf"); other format characters, as the joiner inside an emoji, stay.
            ("evil\u{202E}fdp.exe", "evilfdp.exe"), ("a\u{2066}b\u{2069}\u{200F}.txt", "ab.txt"),
            ("\u{202E}", nil), ("\u{1F469}\u{200D}\u{1F4BB}.png", "\u{1F469}\u{200D}\u{1F4BB}.png"),
        ] as [(String, String?)])
    func safeNames(raw: String, expected: String?) {
        #expect(SafeFileName.sanitize(raw) == expected)
    }

    /// A server's name of many leading dots and dashes (a header may hold 100 KB of them) loses
    /// them all, and only them.
    @Test func manyLeadingDotsAndDashesAllGo() {
        #expect(SafeFileName.sanitize(String(repeating: ".-", count: 50_000) + "x.bin") == "x.bin")
        #expect(SafeFileName.sanitize(String(repeating: ".", count: 50_000)) == nil)
    }

    @Test func longNamesAreCutKeepingTheExtension() throws {
        let name = try #require(SafeFileName.sanitize(String(repeating: "x", count: 300) + ".txt"))
        #expect(name.utf8.count == SafeFileName.maxBytes)
        #expect(name.hasSuffix(".txt"))
        let multibyte = try #require(SafeFileName.sanitize(String(repeating: "é", count: 300)))
        #expect(multibyte.utf8.count <= SafeFileName.maxBytes)
    }

    @Test func suggestedNameFallsBackToTheURL() {
        let url = URL(string: "http://h/dir/na%C3%AFve.bin?x=1")!
        #expect(SafeFileName.suggestedName(contentDisposition: nil, url: url) == "naïve.bin")
        #expect(SafeFileName.suggestedName(contentDisposition: "attachment; filename=\"..\"", url: url) == "naïve.bin")
        #expect(SafeFileName.suggestedName(contentDisposition: nil, url: URL(string: "http://h/")!) == "index.html")
        #expect(SafeFileName.suggestedName(contentDisposition: nil, url: URL(string: "http://h")!) == "index.html")
    }

    /// A bidi control goes before the name's other checks, from a server's name or a URL: what
    /// it hid is judged as the name it leaves (a side-file ending, a leading dot).
    @Test func bidiControlsGoBeforeTheNamesOtherChecks() {
        let header = "attachment; filename*=UTF-8''evil%E2%80%AEfdp.exe"
        let url = URL(string: "http://h/d/x.pa%E2%80%AErt")!
        #expect(SafeFileName.suggestedName(contentDisposition: header, url: url) == "evilfdp.exe")
        #expect(SafeFileName.suggestedName(contentDisposition: nil, url: url) == "x.part_")
        #expect(SafeFileName.sanitize("\u{202E}.bashrc") == "bashrc")
        #expect(SafeFileName.sanitize("\u{061C}a\u{200E}\u{202A}\u{202B}\u{202C}\u{202D}b") == "ab")
    }

    /// The URL's last segment is percent-decoded once, as wget and aria2 do: `%2541` is the text
    /// `%41`, and `%252F` a `%2F` in the name, not a separator.
    @Test func theURLsNameIsPercentDecodedOnce() {
        let url = URL(string: "http://h/d/100%2525%20off%2541.bin?x=%41")!
        #expect(SafeFileName.suggestedName(contentDisposition: nil, url: url) == "100%25 off%41.bin")
        let slash = URL(string: "http://h/d/a%252Fb%2F..%2Fc")!
        #expect(SafeFileName.suggestedName(contentDisposition: nil, url: slash) == "c")
        #expect(SafeFileName.suggestedName(contentDisposition: nil, url: URL(string: "http://h/d/x%252Fy")!) == "x%2Fy")
    }

    /// A `%` decodes only before two hex digits: `%-0` and `%+F` are text (a signed number
    /// would have made them a NUL and a control byte), as is a `%` near the end.
    @Test func percentDecodingTakesTwoHexDigitsOnly() {
        #expect(HTTPParsing.percentDecodedBytes("%41%4a%4A") == Array("AJJ".utf8))
        #expect(HTTPParsing.percentDecodedBytes("a%-0b%+Fc% 1d%4") == Array("a%-0b%+Fc% 1d%4".utf8))
        #expect(HTTPParsing.percentDecodedBytes("%%41%") == Array("%A%".utf8))
    }

    /// A URL naming a directory gets `index.html`, as with wget and aria2, not the directory's
    /// name (Foundation's `URL.path` drops the trailing slash).
    @Test(arguments: ["http://h/dir/", "http://h/dir/?page=2", "http://h/a/b/"])
    func aDirectoryURLIsSavedAsIndexHTML(url: String) throws {
        let url = try #require(URL(string: url))
        #expect(SafeFileName.suggestedName(contentDisposition: nil, url: url) == "index.html")
        #expect(SafeFileName.suggestedName(contentDisposition: "attachment; filename=list.txt", url: url) == "list.txt")
    }

    @Test func retryPolicyBacksOffExponentiallyWithJitterAndGivesUp() {
        let p = RetryPolicy(maxRetries: 3, baseDelay: 1, maxDelay: 3)
        #expect(p.decide(failures: 1, retryAfter: nil, random: 0) == .retry(after: 0.5))
        #expect(p.decide(failures: 1, retryAfter: nil, random: 0.999) == .retry(after: 0.5 + 0.5 * 0.999))
        #expect(p.decide(failures: 2, retryAfter: nil, random: 0) == .retry(after: 1))
        #expect(p.decide(failures: 3, retryAfter: nil, random: 1) == .retry(after: 3))  // capped
        #expect(p.decide(failures: 4, retryAfter: nil) == .giveUp)
        #expect(p.decide(failures: 1, retryAfter: 42) == .retry(after: 42))
        #expect(RetryPolicy(maxRetryAfter: 10).decide(failures: 1, retryAfter: 11) == .giveUp)
    }

    @Test func recordRoundTripsAndRefusesUnknownVersions() throws {
        var r = ResumeRecord(
            url: "http://h/f", finalURL: "http://cdn/f", etag: "\"x\"", lastModified: nil, totalLength: 10,
            ranges: [ByteRange(0, 4)])
        #expect(ResumeRecord.decode(r.encoded()) == r)
        #expect(r.validated)
        r.version = 99
        #expect(ResumeRecord.decode(r.encoded()) == nil)
        #expect(ResumeRecord.decode(Array("not json".utf8)) == nil)
        #expect(
            ResumeRecord.redacted(URL(string: "https://bob:hunter2@h:8443/p?q=1")!) == "https://h:8443/p?q=1")
    }

    @Test func contiguousBytesStopsAtTheFirstGap() {
        let r = ResumeRecord(url: "u", ranges: [ByteRange(0, 10), ByteRange(10, 20), ByteRange(30, 40)])
        #expect(r.contiguousBytes == 20)
    }

    @Test(arguments: [
        ("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        ("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        (
            "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        ),
    ])
    func sha256Vectors(input: String, digest: String) {
        var h = SHA256()
        h.update(Array(input.utf8))
        #expect(h.hexDigest() == digest)
    }

    @Test func sha256InPiecesEqualsWhole() {
        let data = (0..<1000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        var whole = SHA256()
        whole.update(data)
        var pieces = SHA256()
        for chunk in stride(from: 0, to: data.count, by: 37) {
            pieces.update(data[chunk..<min(chunk + 37, data.count)])
        }
        #expect(whole.hexDigest() == pieces.hexDigest())
    }

    @Test func progressFractionAndETA() {
        let p = TransferProgress(completedBytes: 50, totalBytes: 200, bytesPerSecond: 10, smoothedBytesPerSecond: 10)
        #expect(p.fraction == 0.25)
        #expect(p.estimatedTimeRemaining == 15)
        #expect(TransferProgress(completedBytes: 5, totalBytes: nil).fraction == nil)
        #expect(TransferProgress(completedBytes: 0, totalBytes: 0).fraction == 1)
    }

    @Test func smoothedSpeedStartsAtTheFirstMeasurementAndFollowsChanges() {
        var m = ProgressMeter(window: 5)
        _ = m.record(bytes: 0, at: 0)
        #expect(m.record(bytes: 100, at: 1).smoothed == 100)
        let slower = m.record(bytes: 110, at: 3).smoothed  // window speed now 110/3
        #expect(slower < 100 && slower > 110.0 / 3)
    }

    @Test func progressMeterMeasuresOverTheWindow() {
        var m = ProgressMeter(window: 5)
        _ = m.record(bytes: 0, at: 0)
        _ = m.record(bytes: 100, at: 1)
        let (speed, _) = m.record(bytes: 200, at: 2)
        #expect(speed == 100)
        let (later, _) = m.record(bytes: 2200, at: 8)  // old samples leave the window
        #expect(later > 300)
    }
}

@Suite("ASCII helpers for header text", .fewAtOnce)
struct ASCIITests {
    @Test func trimsOnlySpacesTabsAndLineEnds() {
        #expect("  a b \t\r\n".trimmingASCIIWhitespace() == "a b")
        #expect(" \r\n ".trimmingASCIIWhitespace() == "")
        #expect("é ".trimmingASCIIWhitespace() == "é")
        #expect("\u{A0}x".trimmingASCIIWhitespace() == "\u{A0}x", "no-break space is not HTTP whitespace")
    }

    @Test func comparesIgnoringASCIICaseOnly() {
        #expect("Content-Range".equalsIgnoringASCIICase("content-range"))
        #expect(!"Content-Range".equalsIgnoringASCIICase("Content-Rang"))
        #expect(!"a[".equalsIgnoringASCIICase("a{"), "[ and { differ by 0x20 but are not letters")
        #expect(!"é".equalsIgnoringASCIICase("É"))
    }
}

@Suite("Resume records across a kill and a reboot", .fewAtOnce)
struct RecordTrustTests {
    @Test func aNoteIsDueOnlyWithBothItsBytesAndItsTime() {
        let policy = NotePolicy()
        #expect(!policy.isDue(bytesSince: 10 << 20, secondsSince: 0.1), "fast: waits for the interval")
        #expect(policy.isDue(bytesSince: 10 << 20, secondsSince: 0.15))
        #expect(!policy.isDue(bytesSince: 100 << 10, secondsSince: 5), "slow: waits for 256 KiB")
        #expect(policy.isDue(bytesSince: 256 << 10, secondsSince: 5))
    }

    @Test func writtenRangesCountOnlyInTheBootTheyWereWrittenIn() {
        var record = ResumeRecord(url: "u", etag: "\"e\"", totalLength: 100, ranges: [ByteRange(0, 10)])
        record.bootID = "boot-1"
        record.written = [ByteRange(0, 40), ByteRange(50, 60)]
        #expect(record.trusted(onBoot: "boot-1").ranges == [ByteRange(0, 40), ByteRange(50, 60)])
        #expect(record.trusted(onBoot: "boot-2").ranges == [ByteRange(0, 10)], "after a reboot: synced only")
        #expect(record.trusted(onBoot: nil).ranges == [ByteRange(0, 10)])
        #expect(record.trusted(onBoot: "boot-1").written == nil)
        #expect(
            ByteRange.union([ByteRange(5, 9), ByteRange(0, 5), ByteRange(20, 20), ByteRange(8, 12)]) == [
                ByteRange(0, 12)
            ])
    }

    /// A disk pulled out and plugged in again (or forced off and mounted again) is another mount
    /// in the same boot: what was in its page cache is gone, so only synced ranges count.
    @Test func writtenRangesCountOnlyThroughTheMountTheyWereWrittenThrough() {
        var record = ResumeRecord(url: "u", etag: "\"e\"", totalLength: 100, ranges: [ByteRange(0, 10)])
        record.bootID = "boot-1"
        record.mountID = 41
        record.written = [ByteRange(0, 40)]
        #expect(record.trusted(onBoot: "boot-1", mount: 41).ranges == [ByteRange(0, 40)])
        #expect(record.trusted(onBoot: "boot-1", mount: 42).ranges == [ByteRange(0, 10)])
        record.mountID = nil
        #expect(record.trusted(onBoot: "boot-1", mount: 42).ranges == [ByteRange(0, 10)], "written where none was told")
    }

    @Test func gapsAreWhatTheRangesLeaveOut() {
        #expect(ByteRange.gaps(in: 100, leftBy: []) == [ByteRange(0, 100)])
        #expect(
            ByteRange.gaps(in: 100, leftBy: [ByteRange(50, 60), ByteRange(0, 10), ByteRange(55, 70)]) == [
                ByteRange(10, 50), ByteRange(70, 100),
            ])
        #expect(ByteRange.gaps(in: 100, leftBy: [ByteRange(0, 100)]).isEmpty)
        #expect(ByteRange.gaps(in: 100, leftBy: [ByteRange(90, 120)]) == [ByteRange(0, 90)])
    }
}
