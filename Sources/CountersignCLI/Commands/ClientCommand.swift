import ArgumentParser
import Countersign
import CountersignCore
import Foundation

/// `countersign client ...`: the SDK itself, from the command line.
struct ClientCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "client",
        abstract: "Use the client SDK against a server: fetch CustomerInfo, buy through the test store, restore.",
        subcommands: [CustomerInfoCommand.self, PurchaseCommand.self, RestoreCommand.self, LoadCommand.self]
    )

    struct Options: ParsableArguments {
        @Option(help: "The server (or a proxy in front of it).")
        var server: String

        @Option(name: .customLong("api-key"), help: "The app's public API key.")
        var apiKey: String

        @Option(name: .customLong("app-user-id"), help: "The app user id.")
        var appUserId: String

        @Option(name: .customLong("root-key"), help: "A pinned root public key (base64); repeat to pin several.")
        var rootKeys: [String]

        @Option(help: "disabled, informational or enforced.")
        var mode: String = "informational"

        @Option(name: .customLong("store-server"), help: "Where the test store mints purchases (default: --server).")
        var storeServer: String?

        @Option(help: "The SDK's storage directory (default: a fresh temporary one, so nothing is cached).")
        var storage: String?

        @Flag(help: "Print one JSON object.")
        var json = false

        func purchases(storageSuffix: String = "") throws -> Purchases {
            guard let serverURL = URL(string: server), serverURL.scheme != nil else { throw CLIError("--server '\(server)' is not a URL") }
            guard let mode = EntitlementVerificationMode(rawValue: self.mode) else {
                throw CLIError("--mode must be disabled, informational or enforced")
            }
            guard !rootKeys.isEmpty else { throw CLIError("give at least one --root-key") }
            let directory =
                (storage.map { URL(fileURLWithPath: $0) }
                ?? FileManager.default.temporaryDirectory.appendingPathComponent("countersign-client-\(UUID().uuidString)"))
                .appendingPathComponent(storageSuffix)
            let storeURL = storeServer.flatMap { URL(string: $0) } ?? serverURL
            return try CLIError.wrapping("client") {
                let store = try TestStore(serverURL: storeURL, apiKey: apiKey, rootPublicKeys: rootKeys, directory: directory)
                var configuration = Configuration(
                    apiKey: apiKey, appUserID: appUserId, serverURL: serverURL, rootPublicKeys: rootKeys, store: store, storageDirectory: directory
                )
                configuration.entitlementVerificationMode = mode
                configuration.reportsVerificationFailures = false
                // A tool asks for what it shows: no launch requests, no identity carried over from RevenueCat.
                configuration.launchRequests = false
                configuration.revenueCatDefaults = []
                return try Purchases(configuration: configuration)
            }
        }

        /// Prints the outcome (docs/cli.md) and exits non-zero on an error.
        func report(_ result: Result<CustomerInfo, any Error>, extra: [String: Any] = [:]) throws {
            switch result {
            case .success(let info):
                if json {
                    printJSON(ClientReport.json(info).merging(extra) { $1 })
                } else {
                    print(ClientReport.text(info))
                }
            case .failure(let error):
                let purchasesError = error as? PurchasesError
                if json {
                    var object: [String: Any] = ["error": ClientReport.json(error)]
                    if let reason = purchasesError?.verificationFailure {
                        object["verification"] = VerificationResult.failed.rawValue
                        object["reason"] = reason.rawValue
                    }
                    printJSON(object)
                } else {
                    print("error: \(error)")
                }
                throw ExitCode(1)
            }
        }
    }

    struct CustomerInfoCommand: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "customer-info", abstract: "Fetch and verify CustomerInfo.")
        @OptionGroup var options: Options

        func run() async throws {
            let purchases = try options.purchases()
            let result = await capture { try await purchases.customerInfo(fetchPolicy: .fetchCurrent) }
            try options.report(result)
        }
    }

    struct PurchaseCommand: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "purchase", abstract: "Buy a product through the server's test store.")
        @OptionGroup var options: Options
        @Option(help: "The product id.")
        var product: String

        func run() async throws {
            let purchases = try options.purchases()
            let result = await capture { try await purchases.purchase(productID: product) }
            try options.report(result.map(\.customerInfo), extra: (try? result.get()).map { ["transactionId": $0.transaction.transactionId] } ?? [:])
        }
    }

    struct LoadCommand: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "load",
            abstract: "Fetch CustomerInfo many times through the SDK and count the verification results (exit 1 unless all verified)."
        )
        @OptionGroup var options: Options
        @Option(help: "How many fetches in all.")
        var count = 100_000
        @Option(help: "How many SDK instances fetch at once.")
        var concurrency = 8

        func run() async throws {
            guard count > 0, (1...256).contains(concurrency) else { throw CLIError("--count must be positive and --concurrency 1 to 256") }
            let instances = try (0..<concurrency).map { try options.purchases(storageSuffix: "load-\($0)") }
            let start = ContinuousClock.now
            let tallies = await withTaskGroup(of: [String: Int].self) { group in
                for (index, purchases) in instances.enumerated() {
                    let share = count / concurrency + (index < count % concurrency ? 1 : 0)
                    group.addTask {
                        var tally: [String: Int] = [:]
                        for _ in 0..<share {
                            do {
                                let info = try await purchases.customerInfo(fetchPolicy: .fetchCurrent)
                                tally[
                                    info.entitlements.verification.rawValue + (info.verificationFailure.map { " (\($0.rawValue))" } ?? ""), default: 0
                                ] += 1
                            } catch {
                                tally["error: \(error)", default: 0] += 1
                            }
                        }
                        return tally
                    }
                }
                return await group.reduce(into: [String: Int]()) { total, tally in total.merge(tally, uniquingKeysWith: +) }
            }
            let elapsed = ContinuousClock.now - start
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            let verified = tallies["verified"] ?? 0
            print(String(format: "%d fetches in %.1f s (%.0f/s), %d SDK instances", count, seconds, Double(count) / seconds, concurrency))
            for (outcome, number) in tallies.sorted(by: { $0.key < $1.key }) { print("  \(outcome): \(number)") }
            print("false failures: \(count - verified)")
            if verified != count { throw ExitCode(1) }
        }
    }

    struct RestoreCommand: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "restore", abstract: "Post the store's current transactions again (needs --storage with earlier purchases)."
        )
        @OptionGroup var options: Options

        func run() async throws {
            let purchases = try options.purchases()
            let result = await capture { try await purchases.restorePurchases() }
            try options.report(result)
        }
    }
}

/// How the client commands and the demo print CustomerInfo.
enum ClientReport {
    static func json(_ info: CustomerInfo) -> [String: Any] {
        var object: [String: Any] = [
            "verification": info.entitlements.verification.rawValue,
            "appUserId": info.originalAppUserId,
            "requestDate": WireDate.format(info.requestDate),
            "entitlements": info.entitlements.all.mapValues { entitlement -> [String: Any] in
                var value: [String: Any] = ["isActive": entitlement.isActive, "productIdentifier": entitlement.productIdentifier]
                value["expiresDate"] = entitlement.expirationDate.map(WireDate.format) ?? NSNull()
                return value
            },
            "activeSubscriptions": info.activeSubscriptions.sorted(),
        ]
        if let failure = info.verificationFailure { object["reason"] = failure.rawValue }
        return object
    }

    static func json(_ error: any Error) -> [String: Any] {
        switch error as? PurchasesError {
        case .signatureVerificationFailed(let path, let status, let reason)?:
            ["code": "signatureVerificationFailed", "reason": reason.rawValue, "path": path, "status": status]
        case .server(let status, let code, let message)?:
            ["code": "server", "reason": message, "status": status, "serverCode": code ?? NSNull()]
        case .offline(let detail)?:
            ["code": "offline", "reason": detail]
        default:
            ["code": "error", "reason": "\(error)"]
        }
    }

    static func text(_ info: CustomerInfo) -> String {
        var lines = ["verification: \(info.entitlements.verification.rawValue)\(info.verificationFailure.map { " (\($0.rawValue))" } ?? "")"]
        if info.entitlements.all.isEmpty { lines.append("entitlements: none") }
        for (id, entitlement) in info.entitlements.all.sorted(by: { $0.key < $1.key }) {
            let until = entitlement.expirationDate.map { "until \(WireDate.format($0))" } ?? "for life"
            lines.append("entitlement \(id): \(entitlement.isActive ? "active" : "inactive"), \(entitlement.productIdentifier), \(until)")
        }
        return lines.joined(separator: "\n")
    }
}

/// The outcome of an async call as a Result.
func capture<T>(_ body: () async throws -> T) async -> Result<T, any Error> {
    do {
        return .success(try await body())
    } catch {
        return .failure(error)
    }
}

func printJSON(_ object: [String: Any]) {
    let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data("{}".utf8)
    print(String(decoding: data, as: UTF8.self))
}
