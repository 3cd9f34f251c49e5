import HaulTestTraits
import Testing

@testable import HaulCore

/// HTTP dates without Foundation's DateFormatter (which loaded ICU at every start).
@Suite("HTTP dates, read and written byte by byte", .fewAtOnce)
struct HTTPDateTests {
    /// RFC 9110 §5.6.7's example instant, 784111777 s after 1970, in its three forms.
    @Test(arguments: ["Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"])
    func theThreeFormsARecipientMustAccept(_ text: String) {
        #expect(HTTPDate.parse(text) == 784_111_777)
    }

    @Test func writtenAsAnIMFFixdate() {
        #expect(HTTPDate.format(784_111_777) == "Sun, 06 Nov 1994 08:49:37 GMT")
        #expect(HTTPDate.format(0) == "Thu, 01 Jan 1970 00:00:00 GMT")
        #expect(HTTPDate.format(951_782_400) == "Tue, 29 Feb 2000 00:00:00 GMT")
        #expect(HTTPDate.format(-1) == "Wed, 31 Dec 1969 23:59:59 GMT")
        #expect(HTTPDate.format(4_102_444_800) == "Fri, 01 Jan 2100 00:00:00 GMT")
    }

    @Test func whatItWritesItReads() {
        for seconds: Int64 in [0, 1, 86_399, 86_400, 951_868_799, 1_767_225_600, 2_147_483_647, 4_102_444_800] {
            #expect(HTTPDate.parse(HTTPDate.format(seconds)) == seconds, "\(HTTPDate.format(seconds))")
        }
    }

    /// A two-digit year of the obsolete form is read as RFC 9110 says: one more than 50 years
    /// ahead of now is the latest past year with those digits.
    @Test func twoDigitYears() {
        let in2026: Int64 = 1_767_225_600
        #expect(HTTPDate.parse("Thursday, 01-Jan-70 00:00:00 GMT", now: 0) == 0)
        #expect(HTTPDate.parse("Saturday, 01-Jan-00 00:00:00 GMT", now: in2026) == 946_684_800)
        #expect(HTTPDate.parse("Friday, 01-Jan-99 00:00:00 GMT", now: in2026) == 915_148_800)  // 1999
        #expect(HTTPDate.parse("Wednesday, 01-Jan-76 00:00:00 GMT", now: in2026) == 3_345_062_400)  // 2076
        #expect(HTTPDate.parse("Saturday, 01-Jan-77 00:00:00 GMT", now: in2026) == 220_924_800)  // 1977
        // The rule compares instants: the last day of 2076 is more than 50 years after 1 Jan 2026.
        #expect(HTTPDate.parse("Friday, 31-Dec-76 00:00:00 GMT", now: in2026) == 220_838_400)  // 1976
    }

    /// What senders write that the grammar does not allow, but DateFormatter took and curl takes.
    @Test func lenientWhereSendersAre() {
        #expect(HTTPDate.parse("Sun, 06 Nov 1994 08:49:37 UTC") == 784_111_777)
        #expect(HTTPDate.parse("Sun, 06 Nov 1994 08:49:37 gmt") == 784_111_777)
        #expect(HTTPDate.parse("Sun, 6 Nov 1994 08:49:37 GMT") == 784_111_777)
    }

    @Test func writtenWithinFourDigitYears() {
        #expect(HTTPDate.format(Int64.min) == "Mon, 01 Jan 0001 00:00:00 GMT")
        #expect(HTTPDate.format(Int64.max) == "Fri, 31 Dec 9999 23:59:59 GMT")
    }

    @Test(arguments: [
        "", "GMT", "Sun, 06 Nov 1994 08:49:37", "Sun, 06 Nov 1994 08:49:37 PST", "Sun, 06 Nov 1994 08:49:37 +0000",
        "Sun, 31 Feb 1994 08:49:37 GMT", "Sun, 29 Feb 1900 00:00:00 GMT", "Sun, 06 Nov 1994 24:00:00 GMT",
        "Sun, 06 Nov 1994 08:60:00 GMT", "Sun, 006 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 94 08:49:37 GMT",
        "Sun, 06 Foo 1994 08:49:37 GMT", "Xyz, 06 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 1994 08:49 GMT",
        "Sun, ٠٦ Nov 1994 08:49:37 GMT", "Sun, 06 Nov 1994 08:49:37 GMT trailing", "Sun Nov  6 08:49:37 94",
    ])
    func anythingElseIsNoDate(_ text: String) {
        #expect(HTTPDate.parse(text) == nil)
    }

    @Test func unicodeWhitespaceIsTrimmedFromNames() {
        #expect("\u{3000} name.iso \u{A0}\u{85}".trimmingUnicodeWhitespace() == "name.iso")
        #expect(" \t\n".trimmingUnicodeWhitespace() == "")
        #expect("a b".trimmingUnicodeWhitespace() == "a b")
    }

    @Test func hexDigits() {
        #expect(Hex.string([0x00, 0x0F, 0xA5, 0xFF]) == "000fa5ff")
        #expect(Hex.string([0xA5], uppercase: true) == "A5")
        #expect(Hex.string([UInt8]()) == "")
    }
}
