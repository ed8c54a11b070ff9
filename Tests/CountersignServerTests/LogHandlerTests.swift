import CountersignServer
import Foundation
import Logging
import Synchronization
import Testing

/// The server's log handler wrapper: metadata set on a logger reaches the wrapped handler only
/// with the lines logged, merged as `StreamLogHandler` would print it.
@Suite("Deferred metadata log handler")
struct LogHandlerTests {
    final class Recorded: Sendable {
        let events = Mutex<[LogEvent]>([])
    }

    struct Recording: LogHandler {
        let recorded: Recorded
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .info
        var metadataProvider: Logger.MetadataProvider?

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            var event = event
            event.metadata = metadata.merging(event.metadata ?? [:]) { _, own in own }
            recorded.events.withLock { $0.append(event) }
        }
    }

    @Test("metadata set on the logger is in each logged line, a line's own keys win, the level is the wrapped handler's")
    func mergesAtLogTime() {
        let recorded = Recorded()
        var logger = Logger(label: "test") { _ in DeferredMetadataLogHandler(wrapping: Recording(recorded: recorded)) }
        logger.logLevel = .notice
        logger[metadataKey: "request_id"] = "abc"
        logger[metadataKey: "app"] = "demo"
        logger.info("below the level")
        logger.notice("kept", metadata: ["app": "other", "status": "200"])
        logger[metadataKey: "app"] = nil
        logger.error("second")
        let events = recorded.events.withLock { $0 }
        #expect(events.map(\.message.description) == ["kept", "second"])
        #expect(events.first?.metadata == ["request_id": "abc", "app": "other", "status": "200"])
        #expect(events.last?.metadata == ["request_id": "abc"])
        #expect(events.last?.level == .error)
        #expect(logger.logLevel == .notice)
    }
}
