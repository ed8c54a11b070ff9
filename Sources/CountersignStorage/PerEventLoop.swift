import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// One value for each event loop of a group, and the one of the loop the caller runs on.
///
/// `countersign serve` runs Swift's tasks on NIO's event loops (``ServerProcess``), and a task
/// stays on the loop it started on while nothing moves it. What a request uses on its way to the
/// database (a connection pool, a batch of reads) is kept per loop, so the request, its queries
/// and its answer stay on one thread: a connection on the other loop costs two thread wake-ups per
/// round trip. Off an event loop (tests, tools) the values are taken in turn.
final class PerEventLoop<Value: Sendable>: Sendable {
    let all: [(loop: ObjectIdentifier, value: Value)]
    private let turn = NIOLockedValueBox(0)

    init(group: MultiThreadedEventLoopGroup = .singleton, _ make: (any EventLoop) -> Value) {
        all = group.makeIterator().map { loop in (ObjectIdentifier(loop), make(loop)) }
    }

    /// The value of the event loop the caller runs on, or the next one in turn.
    var current: Value {
        if let loop = MultiThreadedEventLoopGroup.currentEventLoop {
            let id = ObjectIdentifier(loop)
            if let own = all.first(where: { $0.loop == id }) { return own.value }
        }
        let index = turn.withLockedValue { turn in
            defer { turn = (turn + 1) % all.count }
            return turn
        }
        return all[index].value
    }
}
