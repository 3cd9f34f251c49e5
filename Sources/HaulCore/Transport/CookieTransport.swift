#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A transport that keeps cookies: each request gets the jar's `Cookie` for its URL (after any
/// `Cookie` header it has), and each answer's `Set-Cookie` fields go into the jar, redirects'
/// included. It sits next to the wire, so a request waiting for a connection slot is sent with
/// the cookies of its moment, and every hop of a redirect chain gets its own host's.
package final class CookieTransport: HTTPTransport {
    private let base: any HTTPTransport
    private let jar: CookieJar

    package init(_ base: any HTTPTransport, jar: CookieJar) {
        self.base = base
        self.jar = jar
    }

    package func start(_ request: TransportRequest, handler: any TransportHandler) -> any TransportTask {
        var request = request
        if let cookies = jar.cookieHeader(for: request.url) {
            let given = request.headers["Cookie"].flatMap { $0.isEmpty ? nil : $0 }
            request.headers.replace("Cookie", given.map { $0 + "; " + cookies } ?? cookies)
        }
        return base.start(request, handler: CookieHandler(handler, jar: jar, url: request.url))
    }
}

/// Takes the `Set-Cookie` fields of an answer before its handler sees it.
private final class CookieHandler: TransportHandler {
    private let handler: any TransportHandler
    private let jar: CookieJar
    private let url: URL

    init(_ handler: any TransportHandler, jar: CookieJar, url: URL) {
        (self.handler, self.jar, self.url) = (handler, jar, url)
    }

    func transportDidReceive(response: TransportResponse) -> Bool {
        jar.store(from: response.headers, for: url)
        return handler.transportDidReceive(response: response)
    }

    func transportDidReceive(body: UnsafeRawBufferPointer) -> BodyDisposition {
        handler.transportDidReceive(body: body)
    }
}
