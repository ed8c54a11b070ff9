import CountersignServer
import Foundation
import Logging
import Testing

/// The server's log handler: lines in `StreamLogHandler`'s format, written to a file and read
/// back as a log shipper would read standard error.
@Suite("Line log handler")
struct LogHandlerTests {
    struct TestFailure: Error, CustomStringConvertible {
        var description: String { "the card was declined" }
    }

    /// Opens a fresh file for a handler to write to, runs `body` with its descriptor, and
    /// returns what was written.
    static func written(_ body: (Int32) -> Void) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("log-\(UUID().uuidString)").path
        let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        try #require(descriptor >= 0)
        defer { unlink(path) }
        body(descriptor)
        close(descriptor)
        return try String(contentsOfFile: path, encoding: .utf8)
    }

    /// What `body` logs through a `LineLogHandler` labelled `test`, as lines.
    static func lines(_ body: (inout Logger) -> Void) throws -> [String] {
        try written { descriptor in
            var logger = Logger(label: "test") { label in LineLogHandler(label: label, descriptor: descriptor) }
            body(&logger)
        }.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    }

    @Test("a line is StreamLogHandler's: time, level, label, metadata sorted by key with the line's own keys winning, [source], message")
    func format() throws {
        let lines = try Self.lines { logger in
            logger.logLevel = .notice
            logger[metadataKey: "request_id"] = "abc"
            logger[metadataKey: "app"] = "demo"
            logger.info("below the level")
            logger.notice("kept", metadata: ["app": "other", "status": "200"])
            logger[metadataKey: "app"] = nil
            logger.error("second")
            logger[metadataKey: "request_id"] = nil
            logger.warning("bare")
        }
        #expect(lines.count == 4)
        #expect(lines.last == "", "every line ends in a newline")
        let time = #"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}[+-]\d{4}"#
        let expected = [
            "notice test: app=other request_id=abc status=200 [CountersignServerTests] kept",
            "error test: request_id=abc [CountersignServerTests] second",
            "warning test: [CountersignServerTests] bare",
        ]
        for (line, rest) in zip(lines, expected) {
            let parts = line.split(separator: " ", maxSplits: 1).map(String.init)
            #expect(parts.count == 2)
            #expect(parts.first?.wholeMatch(of: try Regex(time)) != nil, "\(line)")
            #expect(parts.last == rest)
        }
    }

    @Test("the time is strftime's %Y-%m-%dT%H:%M:%S%z of the second the line was written, in local time")
    func timestamp() throws {
        var before = time_t(0)
        var after = time_t(0)
        let lines = try Self.lines { logger in
            before = time(nil)
            logger.info("now")
            after = time(nil)
        }
        let stamp = try #require(lines.first?.split(separator: " ").first.map(String.init))
        let candidates = Set(
            [before, after].map { second -> String in
                var second = second
                var local = tm()
                localtime_r(&second, &local)
                var buffer = [Int8](repeating: 0, count: 64)
                let count = strftime(&buffer, buffer.count, "%Y-%m-%dT%H:%M:%S%z", &local)
                return String(decoding: buffer.prefix(count).map { UInt8(bitPattern: $0) }, as: UTF8.self)
            })
        #expect(candidates.contains(stamp), "\(stamp) against \(candidates)")
    }

    @Test("an error's message and type join the metadata; a provider's keys sit between the logger's and the line's")
    func errorAndProvider() throws {
        let line = try Self.written { descriptor in
            var handler = LineLogHandler(
                label: "", descriptor: descriptor, metadataProvider: Logger.MetadataProvider { ["shard": "2", "app": "provided"] })
            handler[metadataKey: "app"] = "logger"
            handler[metadataKey: "shard"] = "1"
            handler.log(
                event: LogEvent(
                    level: .error, message: "declined", error: TestFailure(), metadata: ["shard": "3"],
                    source: "Payments", file: #fileID, function: #function, line: #line))
        }
        let rest = line.split(separator: " ", maxSplits: 1).last.map(String.init)
        #expect(
            rest
                == "error: app=provided error.message=the card was declined error.type=CountersignServerTests.LogHandlerTests.TestFailure shard=3 [Payments] declined\n"
        )
    }

    @Test("a long line arrives whole, in one piece")
    func longLine() throws {
        let long = String(repeating: "x", count: 100_000)
        let lines = try Self.lines { logger in logger.info("\(long)") }
        #expect(lines.count == 2)
        #expect(lines.first?.hasSuffix("] " + long) == true)
    }
}
