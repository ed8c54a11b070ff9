import CountersignAppStore
import CountersignCore
import CountersignLedger
import CountersignServerCore
import Foundation

/// The app, times and transactions the ledger's cases share. Transactions are verified by the
/// ledger's own checks and not signed: no rule looks at a signature.
enum Fixture {
    static let now = Date(timeIntervalSince1970: 1_790_000_000)
    static var nowMs: Int64 { now.epochMilliseconds }
    static let day: TimeInterval = 86_400

    static func app(_ behavior: AppConfiguration.TransferBehavior = .transfer) -> AppConfiguration {
        var app = AppConfiguration.makeDemo()
        app.transferBehavior = behavior
        return app
    }

    /// A monthly subscription's transaction `id` of chain `chain`, bought a day ago, expiring in
    /// 29 days, signed `signedAgo` seconds ago.
    static func transaction(
        id: String = "2000", chain: String = "1000", product: String = "pro_monthly", token: UUID? = nil, signedAgo: TimeInterval = 0,
        revokedAgo: TimeInterval? = nil, expiresIn: TimeInterval = 29 * day
    ) throws -> VerifiedTransaction {
        var payload = TransactionPayload(
            transactionId: id, originalTransactionId: chain, bundleId: "com.example.demo", productId: product,
            purchaseDate: now.addingTimeInterval(-day), type: .autoRenewable, environment: .testStore,
            signedDate: now.addingTimeInterval(-signedAgo)
        )
        payload.expiresDate = now.addingTimeInterval(expiresIn)
        payload.revocationDate = revokedAgo.map { now.addingTimeInterval(-$0) }
        payload.appAccountToken = token?.uuidString
        payload.price = 4990
        payload.currency = "USD"
        return try VerifiedTransaction(jws: "jws", payload: payload, app: app())
    }

    /// A non-consumable bought a day ago.
    static func lifetime() throws -> VerifiedTransaction {
        let payload = TransactionPayload(
            transactionId: "3000", originalTransactionId: "3000", bundleId: "com.example.demo", productId: "lifetime",
            purchaseDate: now.addingTimeInterval(-day), type: .nonConsumable, environment: .testStore, signedDate: now)
        return try VerifiedTransaction(jws: "jws", payload: payload, app: app())
    }

    static let seenNow = (first: Int64(1_700_000_000_000), last: now.epochMilliseconds)
}
