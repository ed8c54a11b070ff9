#if canImport(StoreKit) && canImport(UIKit) && (os(iOS) || os(visionOS))
import Foundation
import StoreKit
import UIKit

/// How a refund request ended, as RevenueCat's `RefundRequestStatus` (the request's, not the
/// refund's: Apple decides later, and a refund reaches the server as a notification).
public enum RefundRequestStatus: Int, Sendable, Hashable {
    case userCancelled = 0
    case success = 1
    case error = 2
}

/// The App Store's own sheets, as RevenueCat presents them (iOS and visionOS): each is
/// StoreKit's call on the app's active window scene. Written against StoreKit's documented
/// declarations (`AppStore.showManageSubscriptions(in:)`, `AppStore.presentOfferCodeRedeemSheet(in:)`,
/// `Transaction.latest(for:)`, `Transaction.beginRefundRequest(for:in:)`); not compiled on Linux.
extension Purchases {
    /// The App Store's subscription management sheet.
    @MainActor
    public func showManageSubscriptions() async throws {
        try await AppStore.showManageSubscriptions(in: try Self.activeScene())
    }

    /// The App Store's sheet for redeeming an offer code.
    @MainActor
    public func presentCodeRedemptionSheet() async throws {
        try await AppStore.presentOfferCodeRedeemSheet(in: try Self.activeScene())
    }

    /// The App Store's refund request sheet for the latest transaction of `productID`.
    @MainActor
    public func beginRefundRequest(forProduct productID: String) async throws -> RefundRequestStatus {
        guard let latest = await Transaction.latest(for: productID) else {
            throw PurchasesError.store(.productUnavailable, detail: "no transaction of '\(productID)' to ask a refund for")
        }
        let transactionID: UInt64
        switch latest {
        case .verified(let transaction): transactionID = transaction.id
        case .unverified(let transaction, _): transactionID = transaction.id
        }
        do {
            switch try await Transaction.beginRefundRequest(for: transactionID, in: try Self.activeScene()) {
            case .success: return .success
            case .userCancelled: return .userCancelled
            @unknown default: return .error
            }
        } catch {
            throw PurchasesError.store(.systemError, detail: "the refund request sheet failed: \(error.localizedDescription)")
        }
    }

    /// The refund request sheet for the product behind the customer's entitlement.
    @MainActor
    public func beginRefundRequest(forEntitlement entitlementID: String) async throws -> RefundRequestStatus {
        guard let productID = try await customerInfo().entitlements[entitlementID]?.productIdentifier else {
            throw PurchasesError.configuration("the customer has no entitlement '\(entitlementID)'")
        }
        return try await beginRefundRequest(forProduct: productID)
    }

    /// The window scene in the foreground (else the first), for StoreKit's sheets.
    @MainActor
    private static func activeScene() throws -> UIWindowScene {
        let scenes = UIApplication.shared.connectedScenes.compactMap { $0 as? UIWindowScene }
        guard let scene = scenes.first(where: { $0.activationState == .foregroundActive }) ?? scenes.first else {
            throw PurchasesError.configuration("no window scene to present the App Store's sheet on")
        }
        return scene
    }
}
#endif
