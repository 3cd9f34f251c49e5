import Haul
import HaulCore
import HaulServer

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The CLI's door to `haul serve`: the library's ``DaemonClient`` (the daemon's address and
/// token, its proof before the token is sent), its errors as the CLI's exit codes.
struct DaemonDoor {
    let client: DaemonClient

    static func stateDirectory() -> String? { DaemonClient.stateDirectory() }

    static func tokenFile(_ state: String) -> String { state + "/token" }

    /// Why a call to the daemon failed, and the exit code that says so.
    struct Failure: Error {
        var message: String
        var code: ExitCode
        /// No daemon answers: `get --background` starts one.
        var isNotRunning = false

        init(message: String, code: ExitCode, isNotRunning: Bool = false) {
            (self.message, self.code, self.isNotRunning) = (message, code, isNotRunning)
        }

        init(_ error: HaulError) {
            message = error.message
            isNotRunning = error.code == .daemonNotRunning
            switch error.code {
            case .daemonNotRunning: code = .network
            case .usage: code = .usage
            case .httpStatus: code = .http
            case .fileSystem: code = .internalError
            default: code = ExitCode(error)
            }
        }
    }

    static func open() async throws(Failure) -> DaemonDoor {
        do throws(HaulError) { return DaemonDoor(client: try await DaemonClient.open()) } catch {
            throw Failure(error)
        }
    }

    /// A call to the API; the body of a 2xx answer, else the API's error as a failure.
    func call(_ method: String, _ path: String, json: [UInt8]? = nil) async throws(Failure) -> [UInt8] {
        do throws(HaulError) { return try await client.call(method, path, json: json) } catch { throw Failure(error) }
    }

    /// The event stream: a snapshot, then the changes.
    func events() async throws(Failure) -> ByteStream {
        do throws(HaulError) { return try await client.events() } catch { throw Failure(error) }
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
