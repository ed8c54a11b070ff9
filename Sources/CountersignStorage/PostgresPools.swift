import Logging
import NIOCore
import NIOPosix
import PostgresNIO

/// PostgreSQL connections kept per event loop: one `PostgresClient` (a pool) for each loop of
/// the event loop group, its connections on that loop, and a request served by the pool of the
/// loop it runs on (``PerEventLoop``).
///
/// With one pool for the whole group, a request read on one loop was answered by a connection on
/// the other about half the time: the query went out through that loop and the task resumed
/// there, two thread wake-ups per round trip (the kernel's scheduler and the loops' wake-up pipes
/// were a tenth of the server's CPU on PostgreSQL's CustomerInfo path).
///
/// The group's connection budget is split between the loops (at least two each), so a cluster
/// instance asks PostgreSQL for as many connections as before.
final class PostgresPools: Sendable {
    private let pools: PerEventLoop<PostgresClient>

    init(
        configuration: PostgresClient.Configuration, group: MultiThreadedEventLoopGroup = .singleton,
        totalConnections: Int, logger: Logger
    ) {
        var configuration = configuration
        configuration.options.maximumConnections = max(2, totalConnections / max(Array(group.makeIterator()).count, 1))
        pools = PerEventLoop(group: group) { loop in
            PostgresClient(configuration: configuration, eventLoopGroup: loop, backgroundLogger: logger)
        }
    }

    /// The pool of the event loop the caller runs on, or the next one in turn.
    var client: PostgresClient { pools.current }

    /// Runs every pool until the task is cancelled.
    private func run() async {
        await withDiscardingTaskGroup { group in
            for pool in pools.all {
                // Immediate: each pool is marked running before this call first suspends, so a
                // lease made right after `start()` finds it so (PostgresNIO warns of a lease made
                // before `run()`, a line in the log of every start).
                group.addImmediateTask { await pool.value.run() }
            }
        }
    }

    /// Starts ``run()`` in a task of its own and returns it, every pool already running.
    func start() -> Task<Void, Never> {
        Task.immediate { await self.run() }
    }
}
