import HTTPTypes
import Hummingbird
import CountersignCore
import Foundation
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

extension Request {
    /// The whole request body, refused with 413 (code 4013) beyond the context's upload limit.
    mutating func collectBody(context: ServerRequestContext) async -> Result<Data, APIError> {
        do {
            return .success(Data(try await collectBody(upTo: context.maxUploadSize).readableBytesView))
        } catch {
            return .failure(APIError(.bodyTooLarge, "request body is larger than \(context.maxUploadSize) bytes"))
        }
    }
}
