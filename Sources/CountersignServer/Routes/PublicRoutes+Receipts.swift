import CountersignAppStore
import CountersignCore
import CountersignLedger
import CountersignServerCore
import CountersignStorage
import Foundation
import HTTPTypes
import Hummingbird

/// `POST /v1/receipts`: a purchase posted by the app (a StoreKit 2 signed transaction, or a legacy
/// receipt resolved through the App Store Server API), recorded under the ownership rules and
/// answered with the signed CustomerInfo and its `purchase_status`.
extension PublicRoutes {
    func receipts(_ app: AppConfiguration, _ receipt: ReceiptRequest, _ context: SignedRequestContext) async throws -> SignedAnswer {
        let user = try AppUserIDRules.validated(receipt.appUserId, percentEncoded: false)
        if let offering = receipt.presentedOfferingIdentifier,
            offering.isEmpty || offering.unicodeScalars.count > 200
                || offering.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F })
        {
            throw APIError(.invalidField, "presented_offering_identifier must be 1 to 200 characters without control characters")
        }
        // Before the purchase, so its events carry them.
        try await storeAttributes(receipt.attributes, app: app, user: user, context: context)
        let status: PurchaseStatus
        let info: SubscriberResponse?
        do {
            if Self.isLegacyReceipt(receipt.fetchToken) {
                status = try await recordLegacyReceipt(receipt.fetchToken, app: app, poster: user, now: context.now)
                info = status == .boundToAnotherUser ? nil : try await store.customerInfo(app: app, user: user, now: context.now)
            } else {
                var transaction = try await verify(receipt.fetchToken, app: app)
                transaction.presentedOfferingId = receipt.presentedOfferingIdentifier
                (status, info) = try await store.recordAndRead(transaction, app: app, poster: user, now: context.now)
            }
        } catch let refusal as LedgerError {
            metrics.recordPurchase(app: app.id, outcome: String(APIError(refusal).code))
            throw APIError(refusal)
        } catch let error as APIError {
            metrics.recordPurchase(app: app.id, outcome: String(error.code))
            if error.code == APIErrorCode.signedDateAhead.rawValue { ServerClock.warnBehind(context.logger, detail: error.message) }
            throw error
        }
        metrics.recordPurchase(app: app.id, outcome: status.rawValue)
        guard status != .boundToAnotherUser, let info else {
            throw APIError(.purchaseBoundToAnotherUser, "this purchase carries another user's app account token and stays with that user")
        }
        return SignedAnswer.customerInfo(info, requestedAs: user, member: "purchase_status", string: status.rawValue)
    }

    /// `POST /v1/receipts` with `X-Platform: stripe`: `fetch_token` a Stripe subscription or
    /// Checkout Session id, read from Stripe's API and recorded (``StripeWeb/record(token:app:poster:now:)``).
    func stripeReceipt(_ app: AppConfiguration, _ receipt: ReceiptRequest, _ context: SignedRequestContext) async throws -> SignedAnswer {
        let user = try AppUserIDRules.validated(receipt.appUserId, percentEncoded: false)
        try await storeAttributes(receipt.attributes, app: app, user: user, context: context)
        let status: PurchaseStatus
        let info: SubscriberResponse?
        do {
            (status, info) = try await stripe.record(token: receipt.fetchToken, app: app, poster: user, now: context.now)
        } catch let refusal as LedgerError {
            metrics.recordPurchase(app: app.id, outcome: String(APIError(refusal).code))
            throw APIError(refusal)
        } catch let error as APIError {
            metrics.recordPurchase(app: app.id, outcome: String(error.code))
            throw error
        }
        metrics.recordPurchase(app: app.id, outcome: status.rawValue)
        guard let info else {
            throw APIError(.purchaseBoundToAnotherUser, "this Stripe subscription's metadata names another app user, and it stays with that user")
        }
        return SignedAnswer.customerInfo(info, requestedAs: user, member: "purchase_status", string: status.rawValue)
    }

    /// Stores the attributes a purchase carried, for the poster (whatever becomes of the
    /// purchase); a purchase is never refused for them: the ones the rules refuse are left out
    /// and logged.
    /// A JWS is three base64url parts joined by dots; a legacy receipt is standard base64,
    /// which has no dot. So the two cannot be taken for each other.
    static func isLegacyReceipt(_ token: String) -> Bool {
        var token = token
        // A JWS's first dot follows its header, certificate chain and all (about 3 KB): `memchr`
        // over the bytes, where `contains` goes byte by byte.
        return token.withUTF8 { bytes in
            guard let start = bytes.baseAddress else { return true }
            return memchr(start, Int32(UInt8(ascii: ".")), bytes.count) == nil
        }
    }

    /// Records every transaction of the customer a legacy receipt belongs to (the receipt
    /// verified, then the history fetched from the App Store Server API and verified, see
    /// ``StoreServerAPI/transactions(inLegacyReceipt:app:)``); the status is that of the
    /// receipt's own transaction. Each is recorded as if posted, except that a legacy receipt
    /// never moves a chain another user owns, whatever the app's transfer behaviour (409): the
    /// receipt names a whole account's history, which is more than its poster shows to hold.
    /// A refusal of any stops the rest.
    func recordLegacyReceipt(_ receipt: String, app: AppConfiguration, poster: String, now: Date) async throws -> PurchaseStatus {
        let (id, transactions) = try await storeAPI.transactions(inLegacyReceipt: receipt, app: app)
        var keeping = app
        keeping.transferBehavior = .keepWithOriginal
        var status: PurchaseStatus = .alreadyRecorded
        for transaction in transactions {
            let recorded: PurchaseStatus
            do {
                recorded = try await store.record(transaction, app: keeping, poster: poster, now: now)
            } catch LedgerError.purchaseOwnedByAnotherUser {
                throw APIError(
                    .purchaseOwnedByAnotherUser, "a purchase in this legacy receipt belongs to another user, and a legacy receipt never moves one")
            }
            if transaction.transactionId == id || transactions.count == 1 { status = recorded }
        }
        return status
    }

    /// Verifies a signed transaction for `app`, mapping store errors to API errors.
    func verify(_ jws: String, app: AppConfiguration) async throws -> VerifiedTransaction {
        guard let verifier = verifiers[app.id] else { throw APIError(.internalError, "no store verifier for app '\(app.id)'") }
        let payload: TransactionPayload
        do {
            payload = try await verifier.verify(jws, as: TransactionPayload.self)
        } catch {
            throw APIError(storeRefusal: error, of: "fetch_token")
        }
        return try VerifiedTransaction(jws: jws, payload: payload, app: app)
    }
}
