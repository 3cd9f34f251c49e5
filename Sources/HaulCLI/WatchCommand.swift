import Haul
import HaulCore
import HaulServer

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// `haul watch`: haul serve's downloads as they go, from its event stream (`/api/v1/events`).
/// Changes of state go to stdout, one line each (a record a pipe can read); the live lines (a
/// bar per download and a total) go to stderr on a terminal, redrawn in place.
struct WatchCommand {
    static let help = """
        usage: haul watch [--until-idle]

        Shows haul serve's downloads as they go: a line per download that is queued, running,
        paused or waiting (percent, bar, done/total, speed, ETA) and a total, redrawn in place
        on a terminal (stderr); and on stdout a line per change of state (ID STATE NAME, with
        the reason of a failure). Ctrl-C stops watching (exit 130); the downloads go on.

              --until-idle        exit once nothing is queued, running or waiting: 0 when no
                                  download failed while watching, else 3
        """

    static let options: [Arguments.Option] = [.init("--until-idle")]

    let untilIdle: Bool

    init(_ args: [String]) throws(UsageError) {
        let (v, positionals) = try Arguments.parse(args, options: Self.options)
        guard positionals.isEmpty else { throw UsageError("watch takes no arguments (see haul help watch)") }
        untilIdle = v.flag("--until-idle")
    }

    func run(interrupts: Interrupts) async -> ExitCode {
        let output = Output(mode: .human)
        let watch = Task { () -> ExitCode in
            do {
                let door = try await DaemonDoor.open()
                var view = WatchView(output: output)
                let stream = try await door.events()
                var reader = EventStreamReader()
                for try await chunk in stream {
                    for event in try reader.take(Array(chunk)) {
                        view.apply(event)
                        if event.name == "snapshot" {
                            let n = view.downloads.count
                            Output.emit("haul: watching haul serve (\(n) download\(n == 1 ? "" : "s"))\n", to: 2)
                        }
                        if untilIdle, view.isIdle, try await door.nothingUnfinished() {
                            output.clearBlock()
                            return view.failedWhileWatching ? .network : .success
                        }
                    }
                    view.draw()
                }
                output.clearBlock()
                Output.emit("haul: error: haul serve ended the event stream (it stopped)\n", to: 2)
                return .network
            } catch let error as DaemonDoor.Failure {
                output.clearBlock()
                Output.emit("haul: error: \(Output.printable(error.message))\n", to: 2)
                return error.code
            } catch {
                output.clearBlock()
                if Task.isCancelled { return .interrupted }  // Ctrl-C: not a broken stream
                let why = (error as? HaulError)?.message ?? "\(error)"
                Output.emit("haul: error: the event stream broke: \(Output.printable(why))\n", to: 2)
                return .network
            }
        }
        let interrupted = Locked(false)
        let token = interrupts.onInterrupt {
            interrupted.withLock { $0 = true }
            watch.cancel()
        }
        defer { interrupts.remove(token) }
        let code = await watch.value
        if interrupted.withLock({ $0 }) {
            output.clearBlock()
            return .interrupted
        }
        return code
    }
}
