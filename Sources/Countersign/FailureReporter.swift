import CountersignCore
import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Reports verification failures to `POST /v1/diagnostics/verification_failures` in the
/// background: batched (one request per 2 seconds at most, up to 100 entries), never awaited
/// by the calls that saw the failure, and dropped rather than retried forever when the server
/// cannot take them.
final class FailureReporter: Sendable {
    private enum Message: Sendable {
        case failure(VerificationFailureEvent)
        case flush(CheckedContinuation<Void, Never>)
    }

    static let maximumQueued = 1_000
    /// Failures and flush requests in the order they were made, taken by one background task.
    private let messages: AsyncStream<Message>.Continuation

    init(configuration: Configuration) {
        let queue = Queue(
            apiKey: configuration.apiKey, serverURL: configuration.diagnosticsURL ?? configuration.serverURL,
            session: configuration.session, batchDelay: configuration.diagnosticsBatchDelay, appVersion: configuration.appVersion)
        let (stream, continuation) = AsyncStream<Message>.makeStream()
        messages = continuation
        Task.detached(priority: .background) {
            for await message in stream {
                switch message {
                case .failure(let event): await queue.add(event)
                case .flush(let done):
                    await queue.send()
                    done.resume()
                }
            }
        }
    }

    deinit {
        messages.finish()
    }

    /// Queues one failure; returns at once.
    func report(_ event: VerificationFailureEvent) {
        messages.yield(.failure(event))
    }

    /// Sends every failure reported before this call, and returns once the server answered.
    func flush() async {
        await withCheckedContinuation { done in
            if case .terminated = messages.yield(.flush(done)) { done.resume() }
        }
    }

    actor Queue {
        struct Key: Hashable {
            var reason: String
            var path: String
            var mode: String
        }

        let apiKey: String
        let serverURL: URL
        let session: URLSession
        let batchDelay: Duration
        let appVersion: String?
        private var counts: [Key: (count: Int, appUserID: String)] = [:]
        private var scheduled = false

        init(apiKey: String, serverURL: URL, session: URLSession, batchDelay: Duration, appVersion: String?) {
            self.apiKey = apiKey
            self.serverURL = serverURL
            self.session = session
            self.batchDelay = batchDelay
            self.appVersion = appVersion.flatMap { VerificationFailureReport.isVersionText($0) ? $0 : nil }
        }

        func add(_ event: VerificationFailureEvent) {
            // Paths carry user ids; the report keeps only the route shape.
            let key = Key(reason: event.reason.rawValue, path: Self.routeShape(event.path), mode: event.mode.rawValue)
            guard counts[key] != nil || counts.count < FailureReporter.maximumQueued else { return }
            counts[key, default: (0, event.appUserID)].count += 1
            guard !scheduled else { return }
            scheduled = true
            Task {
                try? await Task.sleep(for: self.batchDelay)
                await self.send()
            }
        }

        func send() async {
            scheduled = false
            let batch = counts.prefix(100)
            guard !batch.isEmpty else { return }
            for (key, _) in batch { counts[key] = nil }
            let failures = batch.map { key, value in
                VerificationFailureReport.Failure(
                    reason: key.reason, path: key.path, mode: key.mode, sdkVersion: CountersignSDK.version, appVersion: appVersion,
                    appUserId: value.appUserID, count: min(value.count, 10_000)
                )
            }
            guard let url = URL(string: serverURL.absoluteString.trimmingSuffix("/") + "/v1/diagnostics/verification_failures"),
                let body = try? JSONEncoder().encode(VerificationFailureReport(failures: failures))
            else { return }
            var request = URLRequest(url: url, timeoutInterval: 30)
            request.httpMethod = "POST"
            request.httpBody = body
            request.setValue("Bearer \(apiKey)", forHTTPHeaderField: "Authorization")
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
            _ = try? await session.data(for: request)
            if !counts.isEmpty { await send() }
        }

        /// `/v1/subscribers/alice/offerings` → `/v1/subscribers/{id}/offerings`.
        static func routeShape(_ path: String) -> String {
            let parts = path.split(separator: "/", omittingEmptySubsequences: false)
            guard parts.count >= 4, parts[1] == "v1", parts[2] == "subscribers", parts[3] != "identify" else { return path }
            return (parts[..<3] + ["{id}"] + parts[4...]).joined(separator: "/")
        }
    }
}
