/// When a download notes in its record the bytes written since it last did (without a sync:
/// ``PartialFile/note(written:)``). A rerun in the same boot trusts them, so a process that dies
/// (kill -9) re-fetches at most what was written since the last note: at most
/// max(``minimumBytes``, ``interval`` of transfer), plus the chunk being written (the interval is
/// 0.15 s so that with the note's own delay and a chunk it stays within a quarter second: at
/// 0.2 s a kill on four connections at 4 MB/s can cost 0.25 s).
///
/// Both conditions must hold: a fast transfer notes every ``interval`` (its ``minimumBytes``
/// come sooner), a slow one every ``minimumBytes`` (its interval passes sooner), and neither
/// writes its record more often than that bound needs.
package struct NotePolicy: Sendable, Equatable {
    /// Seconds of transfer a kill may cost, besides the chunk being written.
    package var interval: Double = 0.15
    /// Bytes a kill may cost.
    package var minimumBytes: Int64 = 256 << 10

    package init() {}

    /// Whether the bytes written since the last note are due to be noted.
    package func isDue(bytesSince: Int64, secondsSince: Double) -> Bool {
        bytesSince >= minimumBytes && secondsSince >= interval
    }
}
