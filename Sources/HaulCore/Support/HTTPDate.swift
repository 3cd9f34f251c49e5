#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// HTTP dates (RFC 9110 §5.6.7) read and written byte by byte: the three forms a recipient must
/// accept, always in GMT. Foundation's `DateFormatter` would load ICU for these fixed English
/// formats.
package enum HTTPDate {
    private static let days = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
    private static let longDays = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    /// Seconds since 1970 for an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the obsolete
    /// RFC 850 form (`Sunday, 06-Nov-94 08:49:37 GMT`) or asctime's (`Sun Nov  6 08:49:37 1994`);
    /// nil for anything else, including a day or time out of range. Lenient where senders are
    /// (as curl is): the zone may be `UTC` as well as `GMT`, in any case, and the day one digit.
    /// The weekday is not checked against the date (nor by curl). `now` (seconds since 1970)
    /// places an RFC 850 date's two-digit year.
    package static func parse(_ text: String, now: Int64 = Int64(Date().timeIntervalSince1970)) -> Int64? {
        let fields = text.split(separator: " ", omittingEmptySubsequences: true)
        if fields.count == 6, fields[0].count == 4, fields[0].hasSuffix(","),
            days.contains(String(fields[0].dropLast())),
            isGMT(fields[5]), let day = number(fields[1], digits: 1...2), let month = month(fields[2]),
            let year = number(fields[3], digits: 4), let time = time(fields[4])
        {
            return seconds(year: year, month: month, day: day, time: time)
        }
        if fields.count == 4, fields[0].hasSuffix(","), longDays.contains(String(fields[0].dropLast())),
            isGMT(fields[3])
        {
            let parts = fields[1].split(separator: "-", omittingEmptySubsequences: false)
            guard parts.count == 3, let day = number(parts[0], digits: 1...2), let month = month(parts[1]),
                let yy = number(parts[2], digits: 2), let time = time(fields[2])
            else { return nil }
            // RFC 9110 §5.6.7: a two-digit year that would be more than 50 years ahead is the
            // latest past year with those digits.
            let thisYear = civil(fromDays: now / 86400).year
            let year = thisYear - thisYear % 100 + yy
            guard let instant = seconds(year: year, month: month, day: day, time: time) else { return nil }
            // Fifty years of 365.2425 days: the rule compares instants, not years.
            if instant - now > 1_577_836_800 { return seconds(year: year - 100, month: month, day: day, time: time) }
            return instant
        }
        if fields.count == 5, days.contains(String(fields[0])), let month = month(fields[1]),
            let day = number(fields[2], digits: 1...2), let time = time(fields[3]),
            let year = number(fields[4], digits: 4)
        {
            return seconds(year: year, month: month, day: day, time: time)
        }
        return nil
    }

    /// A cookie's `Expires` as RFC 6265 (5.1.1) reads it, leniently: the first time (`h:m:s`,
    /// one or two digits each), day of month (1-2 digits), month (its first three letters, any
    /// case) and year (2-4 digits; 70-99 are 19xx, 0-69 20xx) among the words, whatever the
    /// separators (`Wed, 21-Oct-2015 07:28:00 GMT` and the IMF form alike); nil without all four,
    /// or out of range.
    package static func parseCookieDate(_ text: String) -> Int64? {
        func isDelimiter(_ b: UInt8) -> Bool {
            b == 0x09 || (b >= 0x20 && b <= 0x2F) || (b >= 0x3B && b <= 0x40) || (b >= 0x5B && b <= 0x60)
                || (b >= 0x7B && b <= 0x7E)
        }
        var (time, day, month, year): (Int64?, Int64?, Int64?, Int64?) = (nil, nil, nil, nil)
        for token in text.utf8.split(whereSeparator: isDelimiter) {
            let word = Substring(decoding: token, as: UTF8.self)
            let digits = token.prefix { $0 >= 0x30 && $0 <= 0x39 }
            if time == nil, let t = cookieTime(word) {
                time = t
            } else if day == nil, (1...2).contains(digits.count),
                let d = HTTPHeaders.decimal(Substring(decoding: digits, as: UTF8.self))
            {
                day = d
            } else if month == nil, token.count >= 3,
                let m = months.firstIndex(where: { word.prefix(3).equalsIgnoringASCIICase($0) })
            {
                month = Int64(m) + 1
            } else if year == nil, (2...4).contains(digits.count),
                let y = HTTPHeaders.decimal(Substring(decoding: digits, as: UTF8.self))
            {
                year = y < 70 ? y + 2000 : y < 100 ? y + 1900 : y
            }
        }
        guard let time, let day, let month, let year, year >= 1601 else { return nil }
        return seconds(year: year, month: month, day: day, time: time)
    }

    /// A certificate's date as libcurl's certificate info gives it: the
    /// `2027-03-01 12:00:00 GMT` of its GnuTLS build (nothing, or ` GMT`, after the seconds),
    /// else read as a cookie date (RFC 6265's lenient reading), which OpenSSL's
    /// `Mar  1 12:00:00 2027 GMT` is; nil when neither reads it.
    package static func parseCertificateDate(_ text: String) -> Int64? {
        let all = Array(text.utf8)
        let b = Array(all.prefix(19))
        func field(_ range: Range<Int>) -> Int64? {
            HTTPHeaders.decimal(Substring(decoding: b[range], as: UTF8.self))
        }
        guard b.count == 19, b[4] == 0x2D, b[7] == 0x2D, b[10] == 0x20, b[13] == 0x3A, b[16] == 0x3A,
            let year = field(0..<4), let month = field(5..<7), let day = field(8..<10),
            let hour = field(11..<13), let minute = field(14..<16), let second = field(17..<19)
        else { return parseCookieDate(text) }
        guard all.count == 19 || all[19...].elementsEqual(" GMT".utf8), (1...12).contains(month), hour < 24,
            minute < 60, second < 60
        else { return nil }
        return seconds(year: year, month: month, day: day, time: hour * 3600 + minute * 60 + second)
    }

    /// `h:m:s` with one or two digits each, and anything after the seconds' digits.
    private static func cookieTime(_ word: Substring) -> Int64? {
        let parts = word.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 3 else { return nil }
        var values: [Int64] = []
        for (index, part) in parts.enumerated() {
            let digits = index == 2 ? part.prefix { $0.isASCII && $0.isNumber } : part
            guard (1...2).contains(digits.utf8.count), let v = HTTPHeaders.decimal(digits) else { return nil }
            values.append(v)
        }
        guard values[0] < 24, values[1] < 60, values[2] < 60 else { return nil }
        return values[0] * 3600 + values[1] * 60 + values[2]
    }

    /// The IMF-fixdate of `secondsSince1970` (`Sun, 06 Nov 1994 08:49:37 GMT`), within years
    /// 0001-9999 (an instant outside is written as the nearest end).
    package static func format(_ secondsSince1970: Int64) -> String {
        let (dayNumber, inDay, year, month, day) = parts(secondsSince1970)
        // 1970-01-01 was a Thursday (index 3 from Monday).
        let weekday = Int(((dayNumber % 7) + 7 + 3) % 7)
        return "\(days[weekday]), \(two(day)) \(months[Int(month) - 1]) \(paddedYear(year)) "
            + "\(two(inDay / 3600)):\(two(inDay / 60 % 60)):\(two(inDay % 60)) GMT"
    }

    /// `secondsSince1970` as ISO 8601 in UTC (`1994-11-06T08:49:37Z`), within the same years.
    package static func iso8601(_ secondsSince1970: Int64) -> String {
        let (_, inDay, year, month, day) = parts(secondsSince1970)
        return "\(paddedYear(year))-\(two(month))-\(two(day))T"
            + "\(two(inDay / 3600)):\(two(inDay / 60 % 60)):\(two(inDay % 60))Z"
    }

    /// The day number, the second of that day and its civil date, clamped to
    /// 0001-01-01T00:00:00Z ... 9999-12-31T23:59:59Z.
    private static func parts(_ secondsSince1970: Int64) -> (Int64, Int64, Int64, Int64, Int64) {
        let secondsSince1970 = min(max(secondsSince1970, -62_135_596_800), 253_402_300_799)
        let dayNumber = secondsSince1970 >= 0 ? secondsSince1970 / 86400 : (secondsSince1970 - 86399) / 86400
        let (year, month, day) = civil(fromDays: dayNumber)
        return (dayNumber, secondsSince1970 - dayNumber * 86400, year, month, day)
    }

    private static func two(_ n: Int64) -> String { n < 10 ? "0\(n)" : "\(n)" }
    private static func paddedYear(_ year: Int64) -> String {
        String(repeating: "0", count: max(0, 4 - String(year).count)) + String(year)
    }

    private static func number(_ text: Substring, digits: Int) -> Int64? { number(text, digits: digits...digits) }

    private static func isGMT(_ zone: Substring) -> Bool {
        zone.equalsIgnoringASCIICase("GMT") || zone.equalsIgnoringASCIICase("UTC")
    }

    private static func number(_ text: Substring, digits: ClosedRange<Int>) -> Int64? {
        digits.contains(text.utf8.count) ? HTTPHeaders.decimal(text) : nil
    }

    private static func month(_ text: Substring) -> Int64? {
        months.firstIndex(of: String(text)).map { Int64($0) + 1 }
    }

    /// `HH:MM:SS` as seconds into the day (a leap second's 60 is taken, as the grammar allows).
    private static func time(_ text: Substring) -> Int64? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 3, let h = number(parts[0], digits: 2), let m = number(parts[1], digits: 2),
            let s = number(parts[2], digits: 2), h < 24, m < 60, s <= 60
        else { return nil }
        return h * 3600 + m * 60 + s
    }

    private static func seconds(year: Int64, month: Int64, day: Int64, time: Int64) -> Int64? {
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
        let lengths: [Int64] = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        guard day >= 1, day <= lengths[Int(month) - 1] else { return nil }
        return days(fromYear: year, month: month, day: day) * 86400 + time
    }

    /// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
    private static func days(fromYear year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146097 + dayOfEra - 719468
    }

    /// The date of a day number since 1970-01-01 (`civil_from_days`).
    private static func civil(fromDays z0: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let z = z0 + 719468
        let era = (z >= 0 ? z : z - 146096) / 146097
        let dayOfEra = z - era * 146097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }
}
