/// The page's files, shipped in the binary (no CDN, no framework): what `GET /` and its
/// assets answer, with the page's own headers.
enum PageAssets {
    /// The file at `path`, its type and text; nil for any other path.
    static func named(_ path: String) -> (type: String, text: String)? {
        switch path {
        case "/", "/index.html": ("text/html; charset=utf-8", PageHTML.text)
        case "/haul.js": ("text/javascript; charset=utf-8", PageScript.text)
        case "/haul.css": ("text/css; charset=utf-8", PageCSS.text)
        case "/icon.svg": ("image/svg+xml", PageIcon.text)
        default: nil
        }
    }

    /// Script, style, images and calls from the daemon only; never framed; no plug-ins, no
    /// `<base>`, forms only to itself.
    static let policy =
        "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'"

    static let headers: [(name: String, value: String)] = [
        ("Content-Security-Policy", policy), ("X-Frame-Options", "DENY"), ("Cross-Origin-Opener-Policy", "same-origin"),
        ("Cross-Origin-Resource-Policy", "same-origin"),
    ]
}
