import Haul
import HaulCore
import HaulServer

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The CLI's door to `haul serve`: the loopback address the daemon wrote and its token, both in
/// the daemon's 0700 state directory (only this user can read them). The port is not this
/// user's alone: after the daemon stopped, any local process may hold it, so before the token
/// is sent the daemon must prove it knows it (`/api/v1/proof`, an HMAC of a fresh nonce).
/// Calls go straight there: no proxy (it would be sent the token), no cookies, no cache, no
/// retries.
struct DaemonDoor {
    let base: String
    let token: ServeToken
    let session: HaulSession

    /// `$XDG_STATE_HOME/haul/serve`.
    static func stateDirectory() -> String? { XDGDirectory.state.path().map { $0 + "/haul/serve" } }

    static func tokenFile(_ state: String) -> String { state + "/token" }

    /// Why a call to the daemon failed, and the exit code that says so.
    struct Failure: Error {
        var message: String
        var code: ExitCode
        /// No daemon answers: `get --background` starts one.
        var isNotRunning = false

        static func notRunning(_ detail: String? = nil) -> Failure {
            Failure(
                message: "haul serve is not running (start it with 'haul serve')" + (detail.map { ": " + $0 } ?? ""),
                code: .network, isNotRunning: true)
        }
    }

    static func open() async throws(Failure) -> DaemonDoor {
        guard let state = stateDirectory() else {
            throw Failure(message: "no home directory: set HOME or XDG_STATE_HOME", code: .usage)
        }
        let notRunning = Failure.notRunning()
        let found = try? Sys.readSmallFileAndStatus(
            state + "/" + ServeDaemon.addressName, limit: 64, followingLinks: false)
        guard let found = found ?? nil else { throw notRunning }
        // Only what the daemon writes: http://127.0.0.1:PORT.
        let text = String(decoding: found.bytes, as: UTF8.self).trimmingASCIIWhitespace()
        let prefix = "http://127.0.0.1:"
        guard found.status.isOwnAndSecret, text.hasPrefix(prefix), let port = Int(text.dropFirst(prefix.count)),
            (1...65535).contains(port)
        else { throw Failure(message: "\(state)/address is not an address haul serve wrote", code: .internalError) }
        let token: ServeToken?
        do { token = try ServeToken.read(tokenFile(state)) } catch {
            throw Failure(message: error.message, code: .internalError)
        }
        guard let token else { throw notRunning }
        var configuration = HaulConfiguration.ephemeral
        configuration.proxy = .none
        configuration.httpShouldSetCookies = false
        configuration.cache = nil
        configuration.retry.maxRetries = 0
        configuration.timeout.connect = 5
        configuration.timeout.resource = 60
        let door = DaemonDoor(
            base: "http://127.0.0.1:\(port)", token: token, session: HaulSession(configuration: configuration))
        try await door.checkProof()
        return door
    }

    /// Asks the daemon to prove it knows the token, without sending it.
    private func checkProof() async throws(Failure) {
        let nonce = Hex.string((0..<16).map { _ in UInt8.random(in: 0...255) })
        let impostor = Failure(
            message: "something other than haul serve answers on \(base) (it cannot prove it has the token): "
                + "not sending the token", code: .network)
        guard let url = URL(string: base + "/api/v1/proof?nonce=" + nonce) else { throw impostor }
        struct Proof: Decodable { var proof: String }
        let answer: Data
        do throws(HaulError) { answer = try await session.data(for: HaulRequest(url: url)).0 } catch {
            if error.code == .network || error.code == .timeout {
                throw Failure.notRunning()
            }
            throw impostor
        }
        guard let proof = try? JSONDecoder().decode(Proof.self, from: answer),
            token.matchesProof(proof.proof, nonce: nonce)
        else { throw impostor }
    }

    /// A call to the API; the body of a 2xx answer, else the API's error as a failure.
    func call(_ method: String, _ path: String, json: [UInt8]? = nil) async throws(Failure) -> [UInt8] {
        guard let url = URL(string: base + path) else { throw Failure(message: "a bad path \(path)", code: .usage) }
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
                throw Failure(message: "haul serve answered \(status)", code: .http)
            }
            if error.code == .network || error.code == .timeout {
                throw Failure.notRunning(error.message)
            }
            throw Failure(message: error.message, code: ExitCode(error))
        }
        guard (200..<300).contains(status) else {
            struct Refusal: Decodable { var error: String }
            let why = (try? JSONDecoder().decode(Refusal.self, from: Data(body)))?.error ?? "HTTP \(status)"
            throw Failure(message: Output.printable(why), code: [400, 403, 404].contains(status) ? .usage : .http)
        }
        return body
    }

    /// The event stream (`Accept: text/event-stream`): a snapshot, then the changes. Open as long
    /// as the daemon runs: no resource timeout, and an idle one past its 15 s keep-alive.
    func events() async throws(Failure) -> ByteStream {
        guard let url = URL(string: base + "/api/v1/events") else { throw Failure(message: "a bad URL", code: .usage) }
        var configuration = session.configuration
        configuration.timeout.resource = nil
        configuration.timeout.idle = 45
        let request = HaulRequest(
            url: url, headers: ["Authorization": "Bearer \(token.text)", "Accept": "text/event-stream"])
        let opened: (HTTPResponse, ByteStream)
        do throws(HaulError) {
            opened = try await HaulSession(configuration: configuration).bytes(for: request, window: 1 << 16)
        } catch {
            if error.code == .network || error.code == .timeout { throw Failure.notRunning(error.message) }
            throw Failure(message: error.message, code: ExitCode(error))
        }
        guard opened.0.statusCode == 200 else {
            opened.1.cancel()
            throw Failure(message: "haul serve answered \(opened.0.statusCode) to the event stream", code: .http)
        }
        return opened.1
    }

    /// Whether nothing is queued, running or waiting (the whole list, not the first 1000).
    func nothingUnfinished() async throws(Failure) -> Bool {
        struct Page: Decodable { var downloads: [DownloadJSON] }
        let body = try await call("GET", "/api/v1/downloads?state=queued,running,waiting&limit=1")
        return (try? JSONDecoder().decode(Page.self, from: Data(body)))?.downloads.isEmpty ?? false
    }

    /// The list, in queue order (the whole of it, a thousand at a time).
    func list() async throws(Failure) -> [DownloadJSON] {
        struct Page: Decodable { var downloads: [DownloadJSON] }
        var all: [DownloadJSON] = []
        while true {
            let body = try await call("GET", "/api/v1/downloads?limit=1000&offset=\(all.count)")
            guard let page = try? JSONDecoder().decode(Page.self, from: Data(body)) else {
                throw Failure(message: "haul serve's list is not what this haul reads", code: .internalError)
            }
            all += page.downloads
            if page.downloads.count < 1000 { return all }
        }
    }
}
