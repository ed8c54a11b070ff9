import Foundation
import Hummingbird

/// An app backend's webhook endpoint for tests: records every POST it gets, raw enough to be
/// checked offline, and answers with the statuses it is told (200 once those run out).
public actor WebhookReceiver {
    /// One request as it arrived.
    public struct Received: Sendable {
        public var target: String
        public var headers: [(name: String, value: String)]
        public var body: Data

        public func header(_ name: String) -> String? {
            headers.first { $0.name.caseInsensitiveCompare(name) == .orderedSame }?.value
        }

        /// The event object of the body.
        public var event: [String: Any] {
            ((try? JSONSerialization.jsonObject(with: body)) as? [String: Any])?["event"] as? [String: Any] ?? [:]
        }

        /// The request as raw HTTP/1.1, as `countersign verify-webhook` reads a capture.
        public var raw: Data {
            var text = "POST \(target) HTTP/1.1\r\n"
            for (name, value) in headers { text += "\(name): \(value)\r\n" }
            return Data((text + "\r\n").utf8) + body
        }
    }

    public private(set) var received: [Received] = []
    private var answers: [Int]
    /// How long each answer takes (a slow endpoint).
    private let delay: Duration

    public init(answers: [Int] = [], delay: Duration = .zero) {
        self.answers = answers
        self.delay = delay
    }

    /// The statuses the next requests get, in order.
    public func answerNext(_ statuses: [Int]) {
        answers = statuses
    }

    private func record(_ request: Received) -> Int {
        received.append(request)
        return answers.isEmpty ? 200 : answers.removeFirst()
    }

    public nonisolated func makeApplication() -> some ApplicationProtocol {
        let router = Router()
        router.post("**") { request, _ in
            let body = request.body
            let bytes = try await body.collect(upTo: 1 << 20)
            let received = Received(
                target: request.uri.description,
                headers: request.headers.map { ($0.name.rawName, $0.value) },
                body: Data(bytes.readableBytesView)
            )
            let status = await self.record(received)
            try await Task.sleep(for: self.delay)
            return Response(status: .init(code: status))
        }
        return Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)))
    }
}
