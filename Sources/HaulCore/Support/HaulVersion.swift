/// Haul's version, for the User-Agent and `haul --version`.
package enum HaulVersion {
    package static let string = "0.1.0"
    package static let userAgent = "haul/\(string)"
}
