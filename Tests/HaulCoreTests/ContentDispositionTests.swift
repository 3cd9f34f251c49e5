import Foundation
import HaulTestTraits
import Testing

@testable import HaulCore

/// Cases named after greenbytes.de/tech/tc2231 use its header values.
@Suite("Content-Disposition parsing (RFC 6266, RFC 8187)", .fewAtOnce)
struct ContentDispositionTests {
    @Test(arguments: [
        // tc2231 inlwithasciifilename, inlwithfnattach
        ("inline; filename=\"foo.html\"", "foo.html"),
        ("inline; filename=\"Not an attachment!\"", "Not an attachment!"),
        // tc2231 attwithasciifilename, attwithasciifilenamenq, attwithfntokensq
        ("attachment; filename=\"foo.html\"", "foo.html"),
        ("attachment; filename=foo.html", "foo.html"),
        ("attachment; filename='foo.bar'", "'foo.bar'"),
        // Case-insensitive type and names (tc2231 attwithasciifilenameucase).
        ("ATTACHMENT; FILENAME=\"foo.html\"", "foo.html"),
        ("attachment; FileName*=utf-8''foo.html", "foo.html"),
        // Any disposition type, extension parameters ignored (tc2231 attwithfilenameandextparam, attnewandfn).
        ("x-custom; filename=foo.html", "foo.html"),
        ("attachment; foo=\"bar\"; filename=\"foo.html\"", "foo.html"),
        ("attachment; foobar=x; filename=\"foo.html\"", "foo.html"),
        ("attachment; foo=\"\\\"\\\\\";filename=\"foo.html\"", "foo.html"),
        // Quoted-pair unescaping (tc2231 attwithasciifnescapedchar, attwithasciifnescapedquote, attabspathwin).
        ("attachment; filename=\"f\\oo.html\"", "foo.html"),
        ("attachment; filename=\"\\\"quoting\\\" tested.html\"", "\"quoting\" tested.html"),
        ("attachment; filename=\"\\\\foo.html\"", "\\foo.html"),
        ("attachment; filename=\"foo\\ bar\\\tbaz\"", "foo bar\tbaz"),
        // Delimiters inside quotes (tc2231 attwithquotedsemicolon).
        ("attachment; filename=\"Here's a semicolon;.html\"", "Here's a semicolon;.html"),
        ("attachment; filename=\"a, b = [c].txt\"", "a, b = [c].txt"),
        // `%` is literal in `filename` (tc2231 attwithfnrawpctenca, attwithfnusingpct, attwithfnrawpctencaq).
        ("attachment; filename=\"foo-%41.html\"", "foo-%41.html"),
        ("attachment; filename=\"50%.html\"", "50%.html"),
        ("attachment; filename=\"foo-%\\41.html\"", "foo-%41.html"),
        // The raw name, sanitised later (tc2231 attabspath).
        ("attachment; filename=\"/foo.html\"", "/foo.html"),
        // OWS around `;` and `=` (tc2231 attwithasciifilenamews1, attwithfn2231ws2, attwithfn2231ws3).
        ("attachment; filename =\"foo.html\"", "foo.html"),
        ("attachment ;filename = foo.html", "foo.html"),
        ("attachment\t;\tfilename\t=\t\"foo.html\"\t", "foo.html"),
        (" attachment;filename=foo.html ", "foo.html"),
        ("attachment; filename*= UTF-8''foo-%c3%a4.html", "foo-ä.html"),
        ("attachment; filename* =UTF-8''foo-%c3%a4.html", "foo-ä.html"),
        // Non-ASCII in a quoted string (obs-text), e.g. decoded from ISO-8859-1 (tc2231 attwithisofnplain).
        ("attachment; filename=\"\u{E9}t\u{E9}.txt\"", "été.txt"),
        ("attachment; filename=\"foo-ä.html\"", "foo-ä.html"),
        // filename* (tc2231 attwithisofn2231iso, attwithfn2231utf8, attwithfn2231dpct, attwithfn2231abspathdisguised).
        ("attachment; filename*=iso-8859-1''foo-%E4.html", "foo-ä.html"),
        ("attachment; filename*=UTF-8''foo-%c3%a4-%e2%82%ac.html", "foo-ä-€.html"),
        ("attachment; filename*=UTF-8''A-%2541.html", "A-%41.html"),
        ("attachment; filename*=UTF-8''%5cfoo.html", "\\foo.html"),
        ("attachment; filename*=UTF-8'en-US'hello.txt", "hello.txt"),
        // Decoded control bytes are kept here and dropped by SafeFileName.
        ("attachment; filename*=UTF-8''nul%00name%0A.txt", "nul\u{0}name\n.txt"),
        // filename* wins in either order (tc2231 attfnboth, attfnboth2, attfnboth3).
        ("attachment; filename=\"foo-ae.html\"; filename*=UTF-8''foo-%c3%a4.html", "foo-ä.html"),
        ("attachment; filename*=UTF-8''foo-%c3%a4.html; filename=\"foo-ae.html\"", "foo-ä.html"),
        (
            "attachment; filename*0*=ISO-8859-15''euro-sign%3d%a4; filename*=ISO-8859-1''currency-sign%3d%a4",
            "currency-sign=¤"
        ),
        // An unknown charset drops filename* only.
        ("attachment; filename*=x-unknown''foo-%a4.html; filename=fallback.html", "fallback.html"),
        ("attachment; filename=fallback.html; filename*=KOI8-R'ru'%C6%C1%CA%CC", "fallback.html"),
    ])
    func accepted(header: String, name: String) {
        #expect(ContentDisposition.filename(header) == name)
        #expect(HTTPParsing.contentDispositionFilename(header) == name)
    }

    @Test(arguments: [
        // Empty, or no file name (tc2231 inlonly, attonly, attwithnamepct, attconfusedparam, attcdate, dispextbadfn).
        "",
        "   ",
        "inline",
        "attachment",
        "attachment; name=\"foo-%41.html\"",
        "attachment; xfilename=foo.html",
        "attachment; creation-date=\"Wed, 12 Feb 1997 16:29:51 -0500\"",
        "attachment; example=\"filename=example.txt\"",
        "attachment; filename=\"\"",
        "attachment; filename*=UTF-8''",
        // No disposition type (tc2231 attmissingdisposition*, emptydisposition, attreversed, inlonlyquoted).
        "filename=foo.html",
        "x=y; filename=foo.html",
        "\"foo; filename=bar;baz\"; filename=qux",
        "filename=foo.html, filename=bar.html",
        "; filename=foo.html",
        ": inline; attachment; filename=foo.html",
        "filename=foo.html; attachment",
        "\"attachment\"; filename=foo.html",
        // A second disposition type (tc2231 attandinline, attandinline2).
        "inline; attachment; filename=foo.html",
        "attachment; inline; filename=foo.html",
        // Duplicated parameters (tc2231 attwith2filenames).
        "attachment; filename=\"foo.html\"; filename=\"bar.html\"",
        "attachment; filename=foo.html; FILENAME=bar.html",
        "attachment; filename*=UTF-8''a.html; filename*=UTF-8''b.html",
        "attachment; foo=1; filename=a.html; Foo=2",
        // Unquoted values a token cannot hold (tc2231 attwithasciifilenamenqws, attwithtokfncommanq,
        // attfnbrokentoken, attfnbrokentokeniso, attmultinstances, attmissingdelim*).
        "attachment; filename=foo bar.html",
        "attachment; filename=foo,bar.html",
        "attachment; filename=foo[1](2).html",
        "attachment; filename=foo-\u{E4}.html",
        "attachment; filename=dir/file",
        "attachment; filename=foo.html, attachment; filename=bar.html",
        "attachment; foo=foo filename=bar",
        "attachment; filename=bar foo=foo ",
        "attachment filename=bar",
        // Broken quotes (tc2231 attbrokenquotedfn, attbrokenquotedfn2, attbrokenquotedfn3).
        "attachment; filename=\"foo.html\".txt",
        "attachment; filename=\"bar",
        "attachment; filename=foo\"bar;baz\"qux",
        "attachment; filename=\"foo.html\" \"bar\"",
        "attachment; filename=\"",
        "\"",
        "attachment; filename=\"foo\\",
        "attachment; filename=\"foo\\\"",
        // Missing `=` or value, empty parameters (tc2231 attwithasciifilenamenqs, attemptyparam).
        "attachment; filename",
        "attachment; filename=",
        "attachment; filename=;",
        "attachment; filename= ; foo=bar",
        "attachment;",
        "attachment; filename=foo.html ;",
        "attachment; ;filename=foo",
        // Control bytes anywhere.
        "attachment; filename=\"foo\r\n.html\"",
        "attachment; filename=\"foo\n.html\"",
        "attachment; filename=\"foo\u{0}.html\"",
        "attachment; filename=\"foo\u{7F}.html\"",
        "attachment; filename=foo.html\r\nSet-Cookie: a=b",
        // RFC 2047 encoded words are not decoded (tc2231 attrfc2047token; attrfc2047quoted, see the report).
        "attachment; filename==?ISO-8859-1?Q?foo-=E4.html?=",
        "attachment; filename=\"=?ISO-8859-1?Q?foo-=E4.html?=\"",
        "attachment; filename=\"=?utf-8?b?Zm9vLmh0bWw=?=\"",
        "attachment; filename=\"report =?UTF-8?q?caf=C3=A9?= final.pdf\"",
        // Malformed filename* (tc2231 attwithfn2231noc, attwithfn2231quot, attwithfn2231quot2,
        // attwithfn2231singleqmissing, attwithfn2231nbadpct1, attwithfn2231nbadpct2, attwithfn2231ws1).
        "attachment; filename*=''foo-%c3%a4-%e2%82%ac.html",
        "attachment; filename*=\"UTF-8''foo-%c3%a4.html\"",
        "attachment; filename*=\"foo%20bar.html\"",
        "attachment; filename*=UTF-8'foo-%c3%a4.html",
        "attachment; filename*=UTF-8''foo%",
        "attachment; filename*=UTF-8''foo%4",
        "attachment; filename*=UTF-8''f%oo.html",
        "attachment; filename*=UTF-8''foo%zz.html",
        "attachment; filename *=UTF-8''foo-%c3%a4.html",
        "attachment; filename*=UTF-8''foo bar.html",
        "attachment; filename*=UTF-8''foo'bar.html",
        "attachment; filename*=UTF-8''foo-\u{E4}.html",
        "attachment; filename*=UTF-8''foo.html; filename=\"a\"b",
        // Bytes invalid in the declared charset (tc2231 attwithfn2231iso-bad, attwithfn2231utf8-bad).
        "attachment; filename*=utf-8''foo-%E4.html",
        "attachment; filename*=UTF-8''%C0%AF.html",
        "attachment; filename*=UTF-8''%ED%A0%80.html",
        "attachment; filename*=iso-8859-1''foo-%c3%a4-%e2%82%ac.html",
        "attachment; filename=\"fallback.html\"; filename*=UTF-8''%FF.html",
    ])
    func rejected(header: String) {
        #expect(ContentDisposition.filename(header) == nil)
        #expect(HTTPParsing.contentDispositionFilename(header) == nil)
    }

    /// A header that does not parse names the file from the URL instead.
    @Test func unparsableHeaderFallsBackToTheURL() throws {
        let url = try #require(URL(string: "http://h/dir/from-url.bin"))
        let broken = "attachment; filename=a b.txt"
        #expect(SafeFileName.suggestedName(contentDisposition: broken, url: url) == "from-url.bin")
        #expect(SafeFileName.suggestedName(contentDisposition: "attachment; filename=ok.txt", url: url) == "ok.txt")
    }
}
