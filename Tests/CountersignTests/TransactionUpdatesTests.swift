import CountersignCore
import CountersignTesting
import Foundation
import Testing

@testable import Countersign

/// Item 1 of the SDK parity work: every transaction heard. A running app (the SDK with the test
/// store, listening from `configure` on) hears renewals, refunds, Ask-to-Buy approvals, Family
/// Sharing grants and purchases on another device, made by the CLI or the admin API, without
/// calling any fetch. Over real HTTP, on both databases.
@Suite("Transactions heard from the store")
struct TransactionUpdatesTests {
    /// Collects what the delegate receives.
    final class Recorder: PurchasesDelegate, @unchecked Sendable {
        let received = Collected<CustomerInfo>()
        func purchases(_ purchases: Purchases, receivedUpdated customerInfo: CustomerInfo) { received.add(customerInfo) }

        /// Waits (up to 20 s) for a delivered CustomerInfo that satisfies `condition`.
        func first(where condition: (CustomerInfo) -> Bool) async -> CustomerInfo? {
            for _ in 0..<1000 {
                if let match = received.all.last(where: condition) { return match }
                try? await Task.sleep(for: .milliseconds(20))
            }
            return nil
        }
    }

    /// A device: the SDK on a test store account that asks for its transactions every 50 ms.
    static func device(_ harness: SDKHarness, user: String, account: String, completedBy: PurchasesAreCompletedBy = .countersign)
        throws -> (Purchases, TestStore, Recorder)
    {
        var configuration = try harness.configuration(mode: .enforced, user: user, storage: account)
        let store = try TestStore(
            serverURL: harness.serverURL, apiKey: harness.apiKey, rootPublicKeys: [harness.rootKey],
            directory: configuration.storageDirectory, storeAccount: account, pollInterval: .milliseconds(50))
        configuration.store = store
        configuration.purchasesAreCompletedBy = completedBy
        let purchases = try Purchases(configuration: configuration)
        let recorder = Recorder()
        purchases.delegate = recorder
        return (purchases, store, recorder)
    }

    static func cli(_ harness: SDKHarness, _ arguments: [String]) async throws -> String {
        let result = try await CLIRunner.runInBackground(
            ["store"] + arguments + ["--server", harness.serverURL.absoluteString, "--secret-key", harness.app.secretApiKeys[0]])
        #expect(result.status == 0, "countersign store \(arguments.joined(separator: " ")): \(result.stderr)")
        return result.stdout
    }

    /// The transactions a test-store admin answer lists.
    static func transactions(_ output: String) throws -> [[String: Any]] {
        let object = try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any]
        return object?["transactions"] as? [[String: Any]] ?? []
    }

    @Test(
        "a renewal made with the CLI reaches the delegate with the new expiry, a refund takes the entitlement away; the app fetches nothing",
        arguments: TestDatabaseKind.available)
    func renewalAndRefund(_ database: TestDatabaseKind) async throws {
        try await SDKHarness.run(database: database) { harness in
            let (purchases, store, recorder) = try Self.device(harness, user: "renewing-user", account: "renewing-phone")
            let (bought, _) = try await purchases.purchase(productID: "pro_monthly")
            let firstExpiry = try #require(bought.expirationDate)
            let fetchesBefore = harness.proxy.seenRequests.filter { $0.path == "/v1/subscribers/renewing-user" }.count

            let renewal = try #require(
                try Self.transactions(try await Self.cli(harness, ["renew", "--original-transaction-id", bought.originalTransactionId])).first)
            let renewalId = try #require(renewal["transaction_id"] as? String)
            let renewed = await recorder.first { ($0.entitlements["pro"]?.expirationDate ?? .distantPast) > firstExpiry }
            #expect(renewed?.entitlements["pro"]?.isActive == true, "the renewal reached the delegate")
            #expect(renewed?.entitlements.verification == .verified)
            #expect(renewed?.entitlements["pro"]?.periodType == .normal, "a renewal is at full price, the trial is over")

            _ = try await Self.cli(harness, ["refund", "--transaction-id", renewalId])
            _ = try await Self.cli(harness, ["refund", "--transaction-id", bought.transactionId])
            let refunded = await recorder.first { $0.entitlements["pro"]?.isActive != true }
            #expect(refunded != nil, "the refund reached the delegate: pro is no longer active")
            #expect(refunded?.entitlements.verification == .verified)

            let fetchesAfter = harness.proxy.seenRequests.filter { $0.path == "/v1/subscribers/renewing-user" }.count
            #expect(fetchesAfter == fetchesBefore, "the app called no CustomerInfo fetch: the updates came through the store")
            // Heard transactions are finished, as purchases are, in the default mode (the second
            // refund may still be on its way when the first one already ended the entitlement).
            var unfinished = try await store.unfinishedTransactions()
            for _ in 0..<250 where !unfinished.isEmpty {
                try await Task.sleep(for: .milliseconds(20))
                unfinished = try await store.unfinishedTransactions()
            }
            #expect(unfinished.isEmpty)
            withExtendedLifetime(purchases) {}
        }
    }

    @Test(
        "Ask to Buy approved, Family Sharing and a purchase on another device each reach the running app",
        arguments: TestDatabaseKind.available)
    func approvalFamilyAndOtherDevice(_ database: TestDatabaseKind) async throws {
        try await SDKHarness.run(database: database) { harness in
            // Ask to Buy: the purchase pends, nothing is granted; the approval arrives by itself.
            let (child, childStore, childRecorder) = try Self.device(harness, user: "kid", account: "kid-tablet")
            childStore.nextPurchaseOutcome = .pend
            await #expect { try await child.purchase(productID: "pro_monthly") } throws: { ErrorCode.paymentPendingError ~= $0 }
            #expect(try await child.customerInfo(fetchPolicy: .fetchCurrent).entitlements["pro"]?.isActive != true)
            let approved = try #require(try Self.transactions(try await Self.cli(harness, ["approve", "--store-account", "kid-tablet"])).first)
            let afterApproval = await childRecorder.first { $0.entitlements["pro"]?.isActive == true }
            #expect(afterApproval?.entitlements["pro"]?.ownershipType == .purchased, "the approved purchase reached the child's app")
            let again = try await CLIRunner.runInBackground([
                "store", "approve", "--store-account", "kid-tablet", "--server", harness.serverURL.absoluteString,
                "--secret-key", harness.app.secretApiKeys[0],
            ])
            #expect(again.status == 1 && again.stdout.contains("4404"), "nothing is left to approve: \(again.stdout)")

            // Family Sharing: the subscription is shared with a sibling's account.
            let (sibling, _, siblingRecorder) = try Self.device(harness, user: "sibling", account: "sibling-phone")
            _ = try await Self.cli(
                harness, ["share", "--transaction-id", try #require(approved["transaction_id"] as? String), "--store-account", "sibling-phone"])
            let shared = await siblingRecorder.first { $0.entitlements["pro"]?.isActive == true }
            #expect(shared?.entitlements["pro"]?.ownershipType == .familyShared)
            #expect(shared?.entitlements.verification == .verified)

            // Another device on the same account buys: this device hears it.
            let (owner, _, ownerRecorder) = try Self.device(harness, user: "two-devices", account: "shared-id")
            _ = try await Self.cli(harness, ["buy", "--store-account", "shared-id", "--product", "lifetime", "--app-user-id", "two-devices"])
            let elsewhere = await ownerRecorder.first { $0.entitlements["pro"]?.isActive == true }
            #expect(elsewhere != nil, "a purchase on another device reached this one")
            withExtendedLifetime((child, sibling, owner)) {}
        }
    }

    @Test("a transaction that arrives twice (unfinished at launch and again from the store) is posted once; myApp records without finishing")
    func postedOnce() async throws {
        try await SDKHarness.run { harness in
            // The device holds an unfinished transaction (bought while the app was not running).
            let directory = harness.directory.appendingPathComponent("sdk-launch")
            let store = try TestStore(
                serverURL: harness.serverURL, apiKey: harness.apiKey, rootPublicKeys: [harness.rootKey],
                directory: directory, storeAccount: "launch", pollInterval: .milliseconds(50))
            let minted = try #require(
                try harness.server.testStore!.mintPurchase(
                    of: "lifetime", for: harness.app, appAccountToken: AppAccountToken.forAppUserID("launcher")))
            try store.deliver(signedTransaction: minted.jws)
            let transaction = try #require(try await store.unfinishedTransactions().first)

            var configuration = try harness.configuration(mode: .enforced, user: "launcher", storage: "launch")
            configuration.store = store
            configuration.purchasesAreCompletedBy = .myApp
            let purchases = try Purchases(configuration: configuration)
            let recorder = Recorder()
            purchases.delegate = recorder
            // The same transaction again, as StoreKit's updates stream may deliver it at launch.
            async let again: Void = purchases.handleStoreUpdate(transaction)
            async let twice: Void = purchases.handleStoreUpdate(transaction)
            _ = await (again, twice)
            let info = await recorder.first { $0.entitlements["pro"]?.isActive == true }
            #expect(info != nil)
            let posts = harness.proxy.seenRequests.filter { $0.path == "/v1/receipts" }.count
            #expect(posts == 1, "posted once, not \(posts) times")
            #expect(
                try await store.unfinishedTransactions().map(\.transactionId) == [transaction.transactionId],
                "in myApp mode the SDK records but never finishes")

            // recordPurchase records the app's own purchase at once.
            let coins = try await store.purchase("coins_100", appUserID: "launcher", appAccountToken: AppAccountToken.forAppUserID("launcher"))
            let recorded = try await purchases.recordPurchase(coins)
            #expect(recorded.nonSubscriptions.map(\.transactionIdentifier).contains(coins.transactionId))
        }
    }
}
