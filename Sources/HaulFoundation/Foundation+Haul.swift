import Foundation
import Haul

/// Foundation's types where `Haul` takes plain ones: a `FileHandle` for a file descriptor, an
/// `InputStream` for a read function. They are here, not in `Haul`, because Foundation (and on
/// Linux its ICU data) is loaded at the start of every program that links it.
extension HaulSession {
    /// ``HaulSession/download(_:toFileDescriptor:named:options:events:)`` into `handle`'s
    /// descriptor (the handle is not closed).
    public func download(
        _ request: HaulRequest, to handle: FileHandle, named name: String, options: DownloadOptions = DownloadOptions(),
        events: (@Sendable (DownloadEvent) -> Void)? = nil
    ) async throws(HaulError) -> Int64 {
        try await download(
            request, toFileDescriptor: handle.fileDescriptor, named: name, options: options, events: events)
    }
}

extension MultipartForm {
    /// Adds a file read from `stream` (opened on the first read, closed at its end); as
    /// ``MultipartForm/addFile(name:filename:contentType:reading:)``: sent chunked and once.
    public mutating func addFile(name: String, stream: InputStream, filename: String, contentType: String? = nil) {
        nonisolated(unsafe) let stream = stream
        addFile(name: name, filename: filename, contentType: contentType) { buffer in
            if stream.streamStatus == .notOpen { stream.open() }
            let n = stream.read(buffer.baseAddress!.assumingMemoryBound(to: UInt8.self), maxLength: buffer.count)
            if n <= 0 { stream.close() }
            return n
        }
    }
}
