/// A transport that reports each transfer's start (+1) and end (-1): the source of the
/// network activity count.
package final class CountingTransport: HTTPTransport {
    private let base: any HTTPTransport
    private let change: @Sendable (Int) -> Void

    package init(_ base: any HTTPTransport, change: @escaping @Sendable (Int) -> Void) {
        self.base = base
        self.change = change
    }

    package func start(_ request: TransportRequest, handler: any TransportHandler) -> any TransportTask {
        change(1)
        let task = base.start(request, handler: handler)
        let change = change
        task.onFinish { _ in change(-1) }
        return task
    }
}
