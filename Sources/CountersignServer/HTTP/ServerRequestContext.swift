import HTTPTypes
import Hummingbird
import Logging

/// The per-request context of Countersign's routes.
public struct ServerRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
    }

    /// Request bodies are small JSON documents; anything larger is refused with 413.
    public var maxUploadSize: Int { 64 * 1024 }
}
