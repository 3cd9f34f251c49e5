import HaulCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A caller of `haul serve`'s API (the CLI's commands, ``BackgroundSession``): the loopback
/// address the daemon wrote and its token, both in the daemon's 0700 state directory (only this
/// user can read them). The port is not this user's alone: after the daemon stopped, any local
/// process may hold it, so before the token is sent the daemon must prove it knows it
/// (`/api/v1/proof`, an HMAC of a fresh nonce). Calls go straight there: no proxy (it would be
/// sent the token), no cookies, no cache, no retries.
package struct DaemonClient: Sendable {
    package let base: String
    let token: ServeToken
    let session: HaulSession

    /// The address file's name in the state directory: `http://127.0.0.1:PORT`.
    package static let addressName = "address"

    /// `$XDG_STATE_HOME/haul/serve`.
    package static func stateDirectory() -> String? { XDGDirectory.state.path().map { $0 + "/haul/serve" } }

    package static func notRunning(_ detail: String? = nil) -> HaulError {
        HaulError(
            .daemonNotRunning,
            "haul serve is not running (start it with 'haul serve')" + (detail.map { ": " + $0 } ?? ""))
    }

    /// The client of the daemon whose state is in `state`, once it proved it has the token.
    package static func open(state: String? = stateDirectory()) async throws(HaulError) -> DaemonClient {
        guard let state else { throw HaulError(.usage, "no home directory: set HOME or XDG_STATE_HOME") }
        let found = try? Sys.readSmallFileAndStatus(state + "/" + addressName, limit: 64, followingLinks: false)
        guard let found = found ?? nil else { throw notRunning() }
        // Only what the daemon writes: http://127.0.0.1:PORT.
        let text = String(decoding: found.bytes, as: UTF8.self).trimmingASCIIWhitespace()
        let prefix = "http://127.0.0.1:"
        guard found.status.isOwnAndSecret, text.hasPrefix(prefix), let port = Int(text.dropFirst(prefix.count)),
            (1...65535).contains(port)
        else { throw HaulError(.fileSystem, "\(state)/\(addressName) is not an address haul serve wrote") }
        guard let token = try ServeToken.read(state + "/token") else { throw notRunning() }
        var configuration = HaulConfiguration.ephemeral
        configuration.proxy = .none
        configuration.httpShouldSetCookies = false
        configuration.cache = nil
        configuration.retry.maxRetries = 0
        configuration.timeout.connect = 5
        configuration.timeout.resource = 60
        let client = DaemonClient(
            base: "http://127.0.0.1:\(port)", token: token, session: HaulSession(configuration: configuration))
        try await client.checkProof()
        return client
    }

    /// Asks the daemon to prove it knows the token, without sending it.
    private func checkProof() async throws(HaulError) {
        let nonce = Hex.string((0..<16).map { _ in UInt8.random(in: 0...255) })
        // Not `.daemonNotRunning`: a daemon started now would find the port taken.
        let impostor = HaulError(
            .network,
            "something other than haul serve answers on \(base) (it cannot prove it has the token): "
                + "not sending the token")
        guard let url = URL(string: base + "/api/v1/proof?nonce=" + nonce) else { throw impostor }
        struct Proof: Decodable { var proof: String }
        let answer: Data
        do throws(HaulError) { answer = try await session.data(for: HaulRequest(url: url)).0 } catch {
            if error.code == .network || error.code == .timeout { throw Self.notRunning() }
            throw impostor
        }
        guard let proof = try? JSONDecoder().decode(Proof.self, from: answer),
            token.matchesProof(proof.proof, nonce: nonce)
        else { throw impostor }
    }

    /// A call to the API; the body of a 2xx answer, else the API's error: `.usage` for a
    /// refusal (400, 403, 404, with the daemon's reason), `.httpStatus` for another status.
    package func call(_ method: String, _ path: String, json: [UInt8]? = nil) async throws(HaulError) -> [UInt8] {
        guard let url = URL(string: base + path) else { throw HaulError(.usage, "a bad path \(path)") }
        let headers = ["Authorization": "Bearer \(token.text)"]
        let status: Int
        let body: [UInt8]
        do throws(HaulError) {
            if method == "POST" {
                let answer = try await session.post(
                    json ?? Array("{}".utf8), to: url, contentType: "application/json", headers: headers)
                (status, body) = (answer.response.statusCode, Array(answer.body))
            } else {
                let (data, response) = try await session.data(for: HaulRequest(url: url, headers: headers))
                (status, body) = (response.statusCode, Array(data))
            }
        } catch {
            if error.code == .httpStatus, let status = error.httpStatus {
                throw HaulError(.httpStatus, "haul serve answered \(status)", httpStatus: status)
            }
            if error.code == .network || error.code == .timeout { throw Self.notRunning(error.message) }
            throw error
        }
        guard (200..<300).contains(status) else {
            struct Refusal: Decodable { var error: String }
            let why = (try? JSONDecoder().decode(Refusal.self, from: Data(body)))?.error ?? "HTTP \(status)"
            if [400, 403, 404].contains(status) { throw HaulError(.usage, why, httpStatus: status) }
            throw HaulError(.httpStatus, "haul serve answered \(status): \(why)", httpStatus: status)
        }
        return body
    }

    /// The event stream (`Accept: text/event-stream`): a snapshot, then the changes; only
    /// those of background session `session`'s downloads when given. Open as long as the
    /// daemon runs: no resource timeout, and an idle one past its 15 s keep-alive.
    package func events(since: Int64? = nil, session identifier: String? = nil) async throws(HaulError) -> ByteStream {
        let parts = [since.map { "since=\($0)" }, identifier.map { "session=\($0)" }].compactMap { $0 }
        let query = parts.isEmpty ? "" : "?" + parts.joined(separator: "&")
        guard let url = URL(string: base + "/api/v1/events" + query) else { throw HaulError(.usage, "a bad URL") }
        var configuration = session.configuration
        configuration.timeout.resource = nil
        configuration.timeout.idle = 45
        let request = HaulRequest(
            url: url, headers: ["Authorization": "Bearer \(token.text)", "Accept": "text/event-stream"])
        let opened: (HTTPResponse, ByteStream)
        do throws(HaulError) {
            opened = try await HaulSession(configuration: configuration).bytes(for: request, window: 1 << 16)
        } catch {
            if error.code == .network || error.code == .timeout { throw Self.notRunning(error.message) }
            throw error
        }
        guard opened.0.statusCode == 200 else {
            opened.1.cancel()
            throw HaulError(
                .httpStatus, "haul serve answered \(opened.0.statusCode) to the event stream",
                httpStatus: opened.0.statusCode)
        }
        return opened.1
    }
}
