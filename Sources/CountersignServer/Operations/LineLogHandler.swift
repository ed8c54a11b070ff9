import CountersignServerCore
import Logging
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The server's log handler: one line per event on a file descriptor (standard error by
/// default), in the format of swift-log's `StreamLogHandler`, so whatever reads those lines reads
/// these the same:
///
///     2026-11-25T23:01:02+0000 info countersign: method=GET request_id=… route=… status=200 [CountersignServer] request
///
/// (local time with its UTC offset, the level, the label, the metadata as `key=value` sorted by
/// key, the source module in brackets, the message).
///
/// Why not `StreamLogHandler` itself: the server writes a line for every request, and swift-log's
/// handler made it dear (BENCHMARKS.md, decision 14): the logger's metadata merged into a new dictionary,
/// then sorted and joined through intermediate strings, the time zone looked up and the time
/// formatted for each line, the text copied into `FILE` and flushed. Here metadata stays a
/// dictionary on the logger until a line is written (setting the request id on each request's
/// logger renders nothing); a line is rendered once into one byte buffer; the formatted time is
/// kept for the second it names; and the line goes out in one `write(2)`, unbuffered as
/// `StreamLogHandler` flushes.
public struct LineLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level = .info
    public var metadataProvider: Logger.MetadataProvider?
    private let label: String
    private let descriptor: Int32

    public init(label: String, descriptor: Int32 = 2, metadataProvider: Logger.MetadataProvider? = nil) {
        self.label = label
        self.descriptor = descriptor
        self.metadataProvider = metadataProvider
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var line = [UInt8]()
        line.reserveCapacity(256)
        line.append(contentsOf: Self.timestamp())
        line.append(UInt8(ascii: " "))
        line.append(contentsOf: event.level.rawValue.utf8)
        if !label.isEmpty {
            line.append(UInt8(ascii: " "))
            line.append(contentsOf: label.utf8)
        }
        line.append(UInt8(ascii: ":"))
        for (key, value) in effectiveMetadata(event) {
            line.append(UInt8(ascii: " "))
            line.append(contentsOf: key.utf8)
            line.append(UInt8(ascii: "="))
            line.append(contentsOf: value.description.utf8)
        }
        line.append(contentsOf: " [".utf8)
        line.append(contentsOf: event.source.utf8)
        line.append(contentsOf: "] ".utf8)
        line.append(contentsOf: event.message.description.utf8)
        line.append(UInt8(ascii: "\n"))
        Self.writeLine(line, to: descriptor)
    }

    /// The logger's metadata, then the provider's, then the line's own (each later one wins a key
    /// both have), then the error's, as `StreamLogHandler` merges them; sorted by key.
    func effectiveMetadata(_ event: LogEvent) -> [(key: String, value: Logger.MetadataValue)] {
        let provided = metadataProvider?.get() ?? [:]
        let explicit = event.metadata ?? [:]
        var merged: [(key: String, value: Logger.MetadataValue)] = []
        merged.reserveCapacity(metadata.count + provided.count + explicit.count + 2)
        func isExplicit(_ key: String) -> Bool { !explicit.isEmpty && explicit[key] != nil }
        for (key, value) in metadata where !isExplicit(key) && (provided.isEmpty || provided[key] == nil) {
            merged.append((key, value))
        }
        for (key, value) in provided where !isExplicit(key) {
            merged.append((key, value))
        }
        for (key, value) in explicit {
            merged.append((key, value))
        }
        if let error = event.error {
            merged.removeAll { $0.key == "error.message" || $0.key == "error.type" }
            merged.append(("error.message", "\(error)"))
            merged.append(("error.type", "\(String(reflecting: type(of: error)))"))
        }
        merged.sort { $0.key < $1.key }
        return merged
    }

    // MARK: The time

    private static let formattedSecond = Mutex<(second: time_t, text: [UInt8])>((-1, []))

    /// `strftime`'s `%Y-%m-%dT%H:%M:%S%z` of now in local time, formatted once a second.
    static func timestamp() -> [UInt8] {
        var now = time(nil)
        if let kept = formattedSecond.withLock({ $0.second == now ? $0.text : nil }) { return kept }
        var local = tm()
        guard localtime_r(&now, &local) != nil else { return Array("<unknown>".utf8) }
        var buffer = [Int8](repeating: 0, count: 64)
        let count = strftime(&buffer, buffer.count, "%Y-%m-%dT%H:%M:%S%z", &local)
        let text = buffer.prefix(count).map { UInt8(bitPattern: $0) }
        formattedSecond.withLock { $0 = (now, text) }
        return text
    }

    // MARK: Writing

    /// One writer at a time, so that lines longer than a pipe writes at once stay whole.
    private static let writing = Mutex<Void>(())

    /// All of `bytes` to `descriptor`, again after a partial write or an interrupted call. A
    /// failing descriptor (closed, full disk) loses the line, as `fwrite` to it would.
    static func writeLine(_ bytes: [UInt8], to descriptor: Int32) {
        writing.withLock { _ in
            bytes.withUnsafeBytes { buffer in
                var offset = 0
                while offset < buffer.count {
                    let written = write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
                    if written > 0 {
                        offset += written
                    } else if written < 0 && errno == EINTR {
                        continue
                    } else {
                        return
                    }
                }
            }
        }
    }
}
