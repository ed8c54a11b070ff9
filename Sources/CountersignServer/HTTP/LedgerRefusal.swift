import CountersignCore
import CountersignLedger
import Hummingbird

/// The ledger's refusals as the API answers them: the one place a ``LedgerError`` becomes an
/// HTTP status and a stable code.
extension APIError {
    public init(_ error: LedgerError) {
        switch error {
        case .invalidTransaction(let message): self.init(.invalidField, message)
        case .purchaseOwnedByAnotherUser(let message): self.init(.purchaseOwnedByAnotherUser, message)
        }
    }
}

/// A ``LedgerError`` thrown by a route outside the signed group is answered as its API error.
extension LedgerError: HTTPResponseError {
    public var status: HTTPResponse.Status { APIError(self).status }

    public func response(from request: Request, context: some RequestContext) throws -> Response {
        ErrorAnswer.response(APIError(self))
    }
}
