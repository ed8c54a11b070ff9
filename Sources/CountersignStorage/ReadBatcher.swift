import NIOConcurrencyHelpers

/// Reads that go to the database together when they would otherwise wait: at most `maxInFlight`
/// batches are at the database at once, and the reads that arrive meanwhile leave in one batch
/// (up to `maxBatch`) as soon as one of them comes back.
///
/// A read while a slot is free goes out alone at once, from the caller's own task, so a quiet
/// server answers as before. Under load a round trip to PostgreSQL (its write, the wake-up of its
/// backend, the pool's hand-out, the answer's messages and the task switches around them) is paid
/// once for the whole batch instead of once per read.
///
/// A batch starts only after each of its reads arrived, so it sees everything committed before
/// any of them was asked: a purchase acknowledged by another instance is visible to the next read
/// here as it is without batching. A failure of the batch as a whole (the connection, the query)
/// fails each of its reads; an answer of its own (a row that does not decode) fails only its read.
final class ReadBatcher<Request: Sendable, Answer: Sendable>: Sendable {
    typealias Run = @Sendable ([Request]) async throws -> [Result<Answer, any Error>]

    private struct Waiting: Sendable {
        let request: Request
        let continuation: CheckedContinuation<Answer, any Error>
    }

    private struct State: Sendable {
        var waiting: [Waiting] = []
        /// Batches at the database. Reads wait only while this is `maxInFlight`.
        var running = 0
        /// The largest batch so far (for tests and benchmarks).
        var largest = 0
    }

    private let state = NIOLockedValueBox(State())
    private let maxInFlight: Int
    private let maxBatch: Int
    private let run: Run

    init(maxInFlight: Int, maxBatch: Int, run: @escaping Run) {
        precondition(maxInFlight >= 1 && maxBatch >= 1)
        self.maxInFlight = maxInFlight
        self.maxBatch = maxBatch
        self.run = run
    }

    /// The largest batch sent so far.
    var largestBatch: Int { state.withLockedValue { $0.largest } }
    /// Reads waiting for a slot.
    var waitingCount: Int { state.withLockedValue { $0.waiting.count } }

    func read(_ request: Request) async throws -> Answer {
        let leads = state.withLockedValue { state in
            guard state.running < maxInFlight else { return false }
            state.running += 1
            state.largest = max(state.largest, 1)
            return true
        }
        if leads {
            let answer: Result<Answer, any Error>
            do {
                answer = try await answers(to: [request])[0]
            } catch {
                answer = .failure(error)
            }
            // The waiting reads go in a task of their own, so this one is answered now.
            if let next = next() { Task { await drain(next) } }
            return try answer.get()
        }
        return try await withCheckedThrowingContinuation { continuation in
            let batch = state.withLockedValue { state -> [Waiting]? in
                state.waiting.append(Waiting(request: request, continuation: continuation))
                // A slot may have freed between the look above and now: then nobody else would start these.
                guard state.running < maxInFlight else { return nil }
                state.running += 1
                return take(&state)
            }
            if let batch { Task { await drain(batch) } }
        }
    }

    /// A batch came back: the reads that waited meanwhile, which go next, or nil when none did
    /// (the slot is free again).
    private func next() -> [Waiting]? {
        state.withLockedValue { state in
            if state.waiting.isEmpty {
                state.running -= 1
                return nil
            }
            return take(&state)
        }
    }

    private func take(_ state: inout State) -> [Waiting] {
        let count = min(state.waiting.count, maxBatch)
        let batch = Array(state.waiting.prefix(count))
        state.waiting.removeFirst(count)
        state.largest = max(state.largest, count)
        return batch
    }

    /// Sends `batch`, then whatever waits after it, until nothing does.
    private func drain(_ first: [Waiting]) async {
        var batch = first
        while true {
            do {
                for (waiting, answer) in zip(batch, try await answers(to: batch.map(\.request))) { waiting.continuation.resume(with: answer) }
            } catch {
                for waiting in batch { waiting.continuation.resume(throwing: error) }
            }
            guard let next = next() else { return }
            batch = next
        }
    }

    /// One answer for each of `requests`, in their order, or a ``CountMismatch``.
    private func answers(to requests: [Request]) async throws -> [Result<Answer, any Error>] {
        let answers = try await run(requests)
        guard answers.count == requests.count else { throw CountMismatch(asked: requests.count, answered: answers.count) }
        return answers
    }

    /// The batch's run answered a different number of reads than it was asked: a bug.
    struct CountMismatch: Error, CustomStringConvertible {
        let asked: Int
        let answered: Int
        var description: String { "a batch of \(asked) reads came back with \(answered) answers" }
    }
}
