import Logging

/// A log handler that keeps its metadata as a plain dictionary and hands it to the wrapped
/// handler with each event it logs.
///
/// swift-log's `StreamLogHandler` renders its whole metadata to text every time a key is set;
/// the server sets the request id on every request's logger, which cost about 4% of the CPU of
/// a signed health answer while nothing was logged at all. Wrapped, the rendering happens only
/// for lines that are written, and the output is the same: the wrapped handler prints the
/// merged metadata (the event's own keys win over the handler's).
public struct DeferredMetadataLogHandler: LogHandler {
    private var wrapped: any LogHandler
    public var metadata: Logger.Metadata = [:]

    public init(wrapping handler: any LogHandler) {
        wrapped = handler
    }

    public var logLevel: Logger.Level {
        get { wrapped.logLevel }
        set { wrapped.logLevel = newValue }
    }

    public var metadataProvider: Logger.MetadataProvider? {
        get { wrapped.metadataProvider }
        set { wrapped.metadataProvider = newValue }
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var event = event
        if !metadata.isEmpty {
            event.metadata = metadata.merging(event.metadata ?? [:]) { _, own in own }
        }
        wrapped.log(event: event)
    }
}
