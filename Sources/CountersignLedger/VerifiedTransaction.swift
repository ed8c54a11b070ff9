import CountersignAppStore
import CountersignCore
import CountersignServerCore
import Foundation

/// A store transaction that passed signed-data verification, with the fields the server relies on.
///
/// Its product need not be configured: a purchase of a product the app does not list (yet) is
/// recorded all the same (Apple took the money; the app may add the product later) and grants
/// nothing until a product maps it to entitlements.
public struct VerifiedTransaction: Sendable {
    /// The offering the paywall showed when it was bought (RevenueCat's
    /// `presented_offering_identifier`, sent by the device; not part of the signed data).
    public var presentedOfferingId: String?
    /// Where the record comes from: a signed transaction, or a row of another system's export.
    public var origin: Origin = .signed
    public let jws: String
    public let payload: TransactionPayload
    public let transactionId: String
    public let originalTransactionId: String
    public let productId: String
    /// The configured product, nil when the app does not list it.
    public let product: AppConfiguration.Product?
    /// The configured kind, or the kind the App Store names.
    public let kind: AppConfiguration.ProductKind
    /// The environment the signed data names (part of the transaction's key with the app and id).
    public var environment: String { payload.environment?.rawValue ?? "" }

    public enum Origin: Sendable, Equatable {
        /// Verified signed data a device, a notification or the server's own API call brought.
        case signed
        /// Taken from another system's export, unsigned (``init(imported:app:deliversEvents:)``):
        /// stored marked imported until the store's signed copy replaces it, and never replacing
        /// a signed copy.
        case imported(deliversEvents: Bool)
        /// Verified signed data of a purchase's history, fetched by an import.
        case importedHistory(deliversEvents: Bool)
    }

    /// An unsigned record from an export.
    public var isImported: Bool { if case .imported = origin { true } else { false } }

    /// How the events this record makes are stored: marked imported (made by an import) or
    /// not, and delivered to the app's webhooks or not.
    public var eventHandling: (imported: Bool, delivered: Bool) {
        switch origin {
        case .signed: (false, true)
        case .imported(let delivers), .importedHistory(let delivers): (true, delivers)
        }
    }

    /// An imported record: `payload` as the export tells it, with `signedDate` the export's
    /// last change of the row (a later export's copy of it replaces an earlier one's). The
    /// product must be configured.
    public init(imported payload: TransactionPayload, app: AppConfiguration, deliversEvents: Bool) throws(LedgerError) {
        guard app.product(payload.productId ?? "") != nil else {
            throw LedgerError.invalidTransaction("the app does not configure product \(payload.productId ?? "")")
        }
        try self.init(jws: "", payload: payload, app: app)
        origin = .imported(deliversEvents: deliversEvents)
    }

    /// Prices in milliunits a transaction may carry: up to a trillion units of any currency.
    public static let priceRange: ClosedRange<Int64> = 0...1_000_000_000_000_000

    /// Checks the fields the ledger relies on; throws a ``LedgerError`` naming what is missing.
    public init(jws: String, payload: TransactionPayload, app: AppConfiguration) throws(LedgerError) {
        guard let transactionId = payload.transactionId, !transactionId.isEmpty,
            let originalTransactionId = payload.originalTransactionId, !originalTransactionId.isEmpty,
            let productId = payload.productId, !productId.isEmpty
        else { throw LedgerError.invalidTransaction("the transaction lacks a transaction id, original transaction id or product id") }
        // What is stored as text or summed as money comes from whoever signed (a developer's own
        // Xcode certificate signs anything): no control character (PostgreSQL refuses U+0000, a
        // 500 where a 4xx belongs), and a price a sum or a negation cannot overflow.
        for (name, value) in [
            ("transactionId", transactionId), ("originalTransactionId", originalTransactionId), ("productId", productId),
            ("appAccountToken", payload.appAccountToken ?? ""), ("currency", payload.currency ?? ""), ("periodType", payload.periodType),
            ("environment", payload.environment?.rawValue ?? ""),
        ] where value.unicodeScalars.count > 256 || value.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) {
            throw LedgerError.invalidTransaction("the transaction's \(name) must be at most 256 characters without control characters")
        }
        if let price = payload.price, !Self.priceRange.contains(price) {
            throw LedgerError.invalidTransaction("the transaction's price \(price) is outside 0 to \(Self.priceRange.upperBound) milliunits")
        }
        let product = app.product(productId)
        let kind: AppConfiguration.ProductKind
        if let product {
            kind = product.type
        } else {
            switch payload.type {
            case .autoRenewable?: kind = .autoRenewable
            case .nonRenewing?: kind = .nonRenewing
            case .consumable?: kind = .consumable
            case .nonConsumable?: kind = .nonConsumable
            default: throw LedgerError.invalidTransaction("the transaction names no product type the server knows")
            }
        }
        self.jws = jws
        self.payload = payload
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.productId = productId
        self.product = product
        self.kind = kind
    }
}
