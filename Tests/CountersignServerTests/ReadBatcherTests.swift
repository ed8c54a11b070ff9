import CountersignTesting
import Foundation
import NIOConcurrencyHelpers
import Testing

@testable import CountersignServer
@testable import CountersignStorage

/// ``ReadBatcher`` on its own: who goes alone, who waits, what each read gets back.
@Suite("Read batching")
struct ReadBatcherTests {
    /// A stand-in for the database: records each batch it is asked, and holds every batch until
    /// the test opens it.
    final class HeldDatabase: Sendable {
        private struct State {
            var batches: [[Int]] = []
            var open = false
            var held: [CheckedContinuation<Void, Never>] = []
        }

        private let state = NIOLockedValueBox(State())

        var batches: [[Int]] { state.withLockedValue { $0.batches } }

        /// Answers each request with its double, or a failure for negative ones.
        func run(_ requests: [Int]) async throws -> [Result<Int, any Error>] {
            await withCheckedContinuation { continuation in
                let go = state.withLockedValue { state in
                    state.batches.append(requests)
                    if !state.open { state.held.append(continuation) }
                    return state.open
                }
                if go { continuation.resume() }
            }
            return requests.map { $0 < 0 ? .failure(Refused(request: $0)) : .success($0 * 2) }
        }

        func open() {
            let held = state.withLockedValue { state in
                state.open = true
                defer { state.held.removeAll() }
                return state.held
            }
            for continuation in held { continuation.resume() }
        }

        /// Waits until `count` batches have been asked.
        func waitForBatches(_ count: Int) async throws {
            _ = try await waitUntil(interval: .milliseconds(5)) { batches.count >= count }
            try #require(batches.count >= count, "only \(batches.count) of \(count) batches asked")
        }
    }

    struct Refused: Error, Equatable {
        let request: Int
    }

    /// Waits until `count` reads wait in `batcher` (not yet sent).
    static func waitForWaiting(_ batcher: ReadBatcher<Int, Int>, _ count: Int) async throws {
        _ = try await waitUntil(interval: .milliseconds(5)) { batcher.waitingCount >= count }
        try #require(batcher.waitingCount == count, "\(batcher.waitingCount) reads wait, not \(count)")
    }

    @Test("a read while a slot is free goes alone; reads arriving while every slot is taken go together, each getting its own answer")
    func waitingReadsGoTogether() async throws {
        let database = HeldDatabase()
        let batcher = ReadBatcher<Int, Int>(maxInFlight: 2, maxBatch: 32) { try await database.run($0) }
        try await withThrowingTaskGroup(of: (Int, Int).self) { group in
            group.addTask { (1, try await batcher.read(1)) }
            group.addTask { (2, try await batcher.read(2)) }
            try await database.waitForBatches(2)
            for request in 3...12 {
                group.addTask { (request, try await batcher.read(request)) }
            }
            try await Self.waitForWaiting(batcher, 10)
            #expect(database.batches.count == 2, "a read was sent while both slots were taken")
            database.open()
            var answers: [Int: Int] = [:]
            for try await (request, answer) in group { answers[request] = answer }
            #expect(answers == Dictionary(uniqueKeysWithValues: (1...12).map { ($0, $0 * 2) }))
        }
        let batches = database.batches
        #expect(batches.count == 3)
        #expect(batches.prefix(2).allSatisfy { $0.count == 1 })
        #expect(batches.last?.sorted() == Array(3...12))
        #expect(batcher.largestBatch == 10)
        #expect(batcher.waitingCount == 0)
    }

    @Test("no batch is larger than its limit, and none of the waiting reads is left behind")
    func batchesAreBounded() async throws {
        let database = HeldDatabase()
        let batcher = ReadBatcher<Int, Int>(maxInFlight: 1, maxBatch: 4) { try await database.run($0) }
        try await withThrowingTaskGroup(of: (Int, Int).self) { group in
            group.addTask { (0, try await batcher.read(0)) }
            try await database.waitForBatches(1)
            for request in 1...10 {
                group.addTask { (request, try await batcher.read(request)) }
            }
            try await Self.waitForWaiting(batcher, 10)
            database.open()
            var answered = 0
            for try await (request, answer) in group {
                #expect(answer == request * 2)
                answered += 1
            }
            #expect(answered == 11)
        }
        let batches = database.batches
        #expect(batches.map(\.count) == [1, 4, 4, 2])
        #expect(batches.flatMap { $0 }.sorted() == Array(0...10))
        #expect(batcher.largestBatch == 4)
    }

    @Test("a read the database refuses fails alone; a batch that fails as a whole fails each of its reads, and the next batch still goes")
    func failures() async throws {
        let database = HeldDatabase()
        database.open()
        let batcher = ReadBatcher<Int, Int>(maxInFlight: 1, maxBatch: 32) { requests in
            if requests.contains(1000) { throw Refused(request: 1000) }
            return try await database.run(requests)
        }
        #expect(try await batcher.read(5) == 10)
        await #expect(throws: Refused(request: -3)) { try await batcher.read(-3) }
        await #expect(throws: Refused(request: 1000)) { try await batcher.read(1000) }
        #expect(try await batcher.read(6) == 12)

        // In one batch: the refused read fails, the others in it are answered.
        let held = HeldDatabase()
        let together = ReadBatcher<Int, Int>(maxInFlight: 1, maxBatch: 32) { try await held.run($0) }
        try await withThrowingTaskGroup(of: (Int, Result<Int, Refused>).self) { group in
            group.addTask { (0, .success(try await together.read(0))) }
            try await held.waitForBatches(1)
            for request in [7, -8, 9] {
                group.addTask {
                    do { return (request, .success(try await together.read(request))) } catch let error as Refused {
                        return (request, .failure(error))
                    }
                }
            }
            try await Self.waitForWaiting(together, 3)
            held.open()
            var outcomes: [Int: Result<Int, Refused>] = [:]
            for try await (request, outcome) in group { outcomes[request] = outcome }
            #expect(outcomes == [0: .success(0), 7: .success(14), -8: .failure(Refused(request: -8)), 9: .success(18)])
        }
        #expect(held.batches.last?.sorted() == [-8, 7, 9])
    }

    @Test("a batch answered with the wrong number of answers fails its reads rather than mismatching them")
    func countMismatch() async throws {
        let batcher = ReadBatcher<Int, Int>(maxInFlight: 1, maxBatch: 32) { requests in requests.dropLast().map { .success($0) } }
        await #expect(throws: ReadBatcher<Int, Int>.CountMismatch.self) { try await batcher.read(1) }
    }
}
