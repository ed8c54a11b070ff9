import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import PostgresNIO

/// PostgreSQL connections kept per event loop: one `PostgresClient` (a pool) for each loop of
/// the event loop group, its connections on that loop, and a request served by the pool of the
/// loop it runs on.
///
/// `countersign serve` runs Swift's tasks on NIO's event loops (``ServerProcess``), and a task
/// stays on the loop it started on while nothing moves it. With one pool for the whole group, a
/// request read on one loop was answered by a connection on the other about half the time: the
/// query went out through that loop and the task resumed there, two thread wake-ups per round
/// trip (the kernel's scheduler and the loops' wake-up pipes were a tenth of the server's CPU on
/// PostgreSQL's CustomerInfo path). With a pool per loop, the request, its queries and its
/// answer stay on one thread. Off an event loop (tests, tools) the pools are taken in turn.
///
/// The group's connection budget is split between the loops (at least two each), so a cluster
/// instance asks PostgreSQL for as many connections as before.
final class PostgresPools: Sendable {
    private let pools: [(loop: ObjectIdentifier, client: PostgresClient)]
    private let turn = NIOLockedValueBox(0)

    init(configuration: PostgresClient.Configuration, group: MultiThreadedEventLoopGroup = .singleton,
         totalConnections: Int, logger: Logger) {
        let loops = Array(group.makeIterator())
        var configuration = configuration
        configuration.options.maximumConnections = max(2, totalConnections / max(loops.count, 1))
        pools = loops.map { loop in
            (ObjectIdentifier(loop), PostgresClient(configuration: configuration, eventLoopGroup: loop, backgroundLogger: logger))
        }
    }

    /// The pool of the event loop the caller runs on, or the next one in turn.
    var client: PostgresClient {
        if let current = MultiThreadedEventLoopGroup.currentEventLoop {
            let id = ObjectIdentifier(current)
            if let own = pools.first(where: { $0.loop == id }) { return own.client }
        }
        let index = turn.withLockedValue { turn in
            defer { turn = (turn + 1) % pools.count }
            return turn
        }
        return pools[index].client
    }

    /// Runs every pool until the task is cancelled.
    func run() async {
        await withDiscardingTaskGroup { group in
            for pool in pools {
                group.addTask { await pool.client.run() }
            }
        }
    }
}
