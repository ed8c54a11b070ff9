import Foundation

/// Transactions heard from the store outside `purchase`: the SDK listens from `configure` on,
/// as RevenueCat does with StoreKit's `Transaction.updates`.
extension Purchases {
    /// Starts listening to ``PurchaseStore/transactionUpdates()``; stops when the instance goes away.
    func startTransactionListener() {
        let updates = configuration.store.transactionUpdates()
        let task = Task { [weak self] in
            for await transaction in updates {
                guard let self else { return }
                await self.handleStoreUpdate(transaction)
            }
        }
        state.withLock { $0.transactionListener = task }
    }

    /// Records a transaction the store delivered, delivers the new CustomerInfo, and (default
    /// mode) finishes it under the purchase rules. A transaction already handled or in hand
    /// since launch is skipped; one whose recording failed may come again.
    func handleStoreUpdate(_ transaction: StoreTransaction) async {
        let claimed = state.withLock { $0.handledTransactions.insert(transaction.jws).inserted }
        guard claimed else {
            SDKLog.log(.debug, "transaction \(transaction.transactionId) already handled")
            return
        }
        SDKLog.log(
            .info,
            "heard transaction \(transaction.transactionId) of \(transaction.productId) from the store\(transaction.revocationDate == nil ? "" : " (revoked)")"
        )
        do {
            let info = try await post(transaction)
            deliver(info, force: true)
        } catch {
            SDKLog.log(.error, "could not record transaction \(transaction.transactionId) heard from the store: \(error)")
            _ = state.withLock { $0.handledTransactions.remove(transaction.jws) }
        }
    }

    /// Records a purchase the app made itself (with `purchasesAreCompletedBy = .myApp`), at once,
    /// as RevenueCat's `recordPurchase`: posted, the new CustomerInfo delivered and returned. The
    /// transaction is never finished by the SDK in `.myApp` mode.
    @discardableResult
    public func recordPurchase(_ transaction: StoreTransaction) async throws -> CustomerInfo {
        state.withLock { _ = $0.handledTransactions.insert(transaction.jws) }
        do {
            let info = try await post(transaction)
            deliver(info, force: true)
            return info
        } catch {
            _ = state.withLock { $0.handledTransactions.remove(transaction.jws) }
            throw error
        }
    }
}
