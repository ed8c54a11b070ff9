import CountersignCore

/// Why the ledger refuses a fact or a change. The server answers each with its API error at the
/// HTTP edge (`APIError(_:)` in CountersignServer); nothing below the routes knows about HTTP.
public enum LedgerError: Error, Hashable, Sendable, CustomStringConvertible {
    /// A transaction lacks, or misstates, a field the ledger relies on (an id, a product type, a
    /// price in range, text without control characters), or names a product an import needs
    /// configured.
    case invalidTransaction(String)
    /// The purchase belongs to another user, and the app's transfer behaviour keeps it there.
    case purchaseOwnedByAnotherUser(String)

    /// What is wrong, in a sentence for the API's `message`.
    public var message: String {
        switch self {
        case .invalidTransaction(let message), .purchaseOwnedByAnotherUser(let message): message
        }
    }

    public var description: String { message }
}

/// A customer's app user id, compared as the databases compare ids: by their UTF-8 bytes
/// (`AppUserID.same`), never by Swift's Unicode-equivalence `==` on `String`. Every ownership
/// decision in the ledger compares these, so a rule cannot use the wrong comparison.
public struct CustomerID: Hashable, Sendable, CustomStringConvertible, ExpressibleByStringLiteral {
    public let rawValue: String

    public init(_ rawValue: String) { self.rawValue = rawValue }
    public init(stringLiteral value: String) { rawValue = value }

    public static func == (a: CustomerID, b: CustomerID) -> Bool { a.rawValue.utf8.elementsEqual(b.rawValue.utf8) }
    public func hash(into hasher: inout Hasher) { for byte in rawValue.utf8 { hasher.combine(byte) } }

    /// An id the SDK made up for a user who has not logged in (`$RCAnonymousID:…`).
    public var isAnonymous: Bool { ReservedAppUserID.isAnonymous(rawValue) }
    public var description: String { rawValue }
}
