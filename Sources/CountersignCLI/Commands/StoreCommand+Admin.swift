import ArgumentParser
import CountersignCore
import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// `countersign store renew|refund|approve|share|buy`: the App Store's part for test-store
/// purchases, played on a running server through its admin API (secret key). Running apps hear
/// each change through their store account's transactions, as StoreKit's `Transaction.updates`.
extension StoreCommand {
    struct ServerOptions: ParsableArguments {
        @Option(help: "The running server, e.g. http://127.0.0.1:8080.")
        var server: String

        @Option(name: .customLong("secret-key"), help: "The app's secret API key (or set COUNTERSIGN_SECRET_KEY).")
        var secretKey: String?

        /// Posts `body` to `/v1/admin/test_store/ACTION` and prints the answer; a refusal exits 1.
        func post(_ action: String, _ body: [String: String?]) async throws {
            guard let key = secretKey ?? ProcessInfo.processInfo.environment["COUNTERSIGN_SECRET_KEY"] else {
                throw CLIError("give --secret-key or set COUNTERSIGN_SECRET_KEY")
            }
            guard let url = URL(string: (server.hasSuffix("/") ? String(server.dropLast()) : server) + "/v1/admin/test_store/" + action) else {
                throw CLIError("--server '\(server)' is not a URL")
            }
            var request = URLRequest(url: url)
            request.httpMethod = "POST"
            request.setValue("Bearer \(key)", forHTTPHeaderField: "Authorization")
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
            request.httpBody = try JSONSerialization.data(withJSONObject: body.compactMapValues { $0 }, options: [.sortedKeys])
            let data: Data
            let response: URLResponse
            do {
                (data, response) = try await URLSession.shared.data(for: request)
            } catch {
                throw CLIError("cannot reach \(server): \(error.localizedDescription)")
            }
            let status = (response as? HTTPURLResponse)?.statusCode ?? 0
            print(String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
            guard (200..<300).contains(status) else {
                FileHandle.standardError.write(Data("error: the server answered \(status)\n".utf8))
                throw ExitCode(1)
            }
        }
    }

    struct Renew: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Renew a test-store subscription now (recorded at once, heard by the app).")
        @OptionGroup var options: ServerOptions
        @Option(name: .customLong("original-transaction-id"), help: "The subscription's original transaction id.")
        var originalTransactionId: String
        func run() async throws { try await options.post("renew", ["original_transaction_id": originalTransactionId]) }
    }

    struct Refund: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Refund a test-store transaction (recorded at once, heard by the app).")
        @OptionGroup var options: ServerOptions
        @Option(name: .customLong("transaction-id"), help: "The transaction to refund.")
        var transactionId: String
        func run() async throws { try await options.post("refund", ["transaction_id": transactionId]) }
    }

    struct Approve: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Approve an account's Ask-to-Buy purchases (or one of them).")
        @OptionGroup var options: ServerOptions
        @Option(name: .customLong("store-account"), help: "The test store account that asked.")
        var storeAccount: String
        @Option(name: .customLong("pending-id"), help: "Approve only this request.")
        var pendingId: String?
        func run() async throws { try await options.post("approve", ["store_account": storeAccount, "pending_id": pendingId]) }
    }

    struct Share: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Share a purchase with a family member's test store account (Family Sharing).")
        @OptionGroup var options: ServerOptions
        @Option(name: .customLong("transaction-id"), help: "The organizer's transaction.")
        var transactionId: String
        @Option(name: .customLong("store-account"), help: "The family member's test store account.")
        var storeAccount: String
        func run() async throws { try await options.post("share", ["transaction_id": transactionId, "store_account": storeAccount]) }
    }

    struct Buy: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Buy a product on another device signed in to a test store account.")
        @OptionGroup var options: ServerOptions
        @Option(name: .customLong("store-account"), help: "The account the purchase goes to.")
        var storeAccount: String
        @Option(help: "The product id.")
        var product: String
        @Option(name: .customLong("app-user-id"), help: "The app user signed in on that other device (binds its app account token).")
        var appUserId: String?
        func run() async throws {
            try await options.post("purchase", ["store_account": storeAccount, "product_id": product, "app_user_id": appUserId])
        }
    }
}
