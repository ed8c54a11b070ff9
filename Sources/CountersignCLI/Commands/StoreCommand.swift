import ArgumentParser
import CountersignAppStore
import CountersignCore
import CountersignServerCore
import Foundation
import X509

struct StoreCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "store",
        abstract: "Mint and check App Store signed data; play the App Store's part for a running server's test store.",
        subcommands: [Purchase.self, Verify.self, Renew.self, Refund.self, Approve.self, Share.self, Buy.self]
    )

    struct Purchase: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Mint a test-store transaction JWS for the app in a data directory and print it.",
            discussion: """
                The test store CA lives in DIR/test-store (created on first use). The app and its \
                products come from DIR/countersign.json, or the built-in demo app when there is none.
                """
        )

        @Option(name: .customLong("data-dir"), help: "The server's data directory.")
        var dataDir: String

        @Option(help: "A product id configured for the app.")
        var product: String

        @Option(name: .customLong("app-user-id"), help: "Bind the purchase to this app user (its derived appAccountToken).")
        var appUserId: String?

        @Option(name: .customLong("app-account-token"), help: "Bind the purchase to this appAccountToken (UUID).")
        var appAccountToken: String?

        @Option(help: "The environment the transaction claims (TestStore unless you are testing rejection).")
        var environment: String = "TestStore"

        @Option(help: "The app id in countersign.json (default: the first app).")
        var app: String?

        func run() throws {
            let directory = URL(fileURLWithPath: dataDir)
            let configuration =
                try CLIError.wrapping("configuration") {
                    try DeploymentConfiguration.load(fromDataDirectory: directory)
                } ?? DeploymentConfiguration(apps: [.makeDemo()])
            guard let appConfiguration = app.map({ id in configuration.apps.first { $0.id == id } }) ?? configuration.apps.first else {
                throw CLIError("no app '\(app ?? "")' in \(DataDirectory(directory).configurationFile.path)")
            }
            var token: UUID?
            if let appAccountToken {
                guard let uuid = UUID(uuidString: appAccountToken) else { throw CLIError("--app-account-token '\(appAccountToken)' is not a UUID") }
                token = uuid
            } else if let appUserId {
                token = AppAccountToken.forAppUserID(appUserId)
            }
            let ca = try CLIError.wrapping("test store CA") {
                try TestStoreCA.loadOrCreate(for: DataDirectory(directory))
            }
            let storeEnvironment = AppStoreEnvironment(rawValue: environment)
            if storeEnvironment != .testStore {
                FileHandle.standardError.write(
                    Data("warning: the test store only vouches for TestStore; a \(environment) transaction it signs will be refused\n".utf8))
            }
            guard let (jws, _) = try ca.mintPurchase(of: product, for: appConfiguration, appAccountToken: token, environment: storeEnvironment) else {
                throw CLIError(
                    "product '\(product)' is not configured for app '\(appConfiguration.id)' (known: \(appConfiguration.products.map(\.id).joined(separator: ", ")))"
                )
            }
            print(jws)
        }
    }

    struct Verify: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Verify App Store signed data and print its payload.",
            discussion: """
                Prints the payload JSON and exits 0, or prints 'error: STATUS (reason): detail' and \
                exits 1, where STATUS is the VerificationStatus Apple's App Store Server Library gives \
                for the same data (VERIFICATION_FAILURE, INVALID_APP_IDENTIFIER, INVALID_CERTIFICATE, \
                INVALID_CHAIN_LENGTH, INVALID_ENVIRONMENT) and reason says which check refused it. \
                A configuration Apple's library refuses (Production without --app-apple-id) exits 2. \
                Without --root, Apple Root CA - G3 (built in) is the only trusted root.
                """
        )

        @Argument(help: "A file holding one compact JWS.")
        var file: String

        @Option(help: "A trusted root certificate (DER or PEM); repeat for several.")
        var root: [String] = []

        @Option(name: .customLong("bundle-id"), help: "The app's bundle id.")
        var bundleId: String?

        @Option(name: .customLong("app-apple-id"), help: "The app's App Store id (checked on Production data).")
        var appAppleId: Int64?

        @Option(help: "An environment to accept; repeat for several (default: any the root vouches for; Production only with --app-apple-id).")
        var environment: [String] = []

        @Option(
            help:
                "What the JWS holds: \(SignedDataVerifier.Kind.allCases.map(\.rawValue).joined(separator: ", ")) (default: guessed from its fields).")
        var kind: String?

        @Option(help: "The current time as Unix seconds (for the future-date check and undated payloads).")
        var at: Int?

        @Flag(help: "Accept StoreKit Testing in Xcode data (development only; needs --xcode-certificate).")
        var xcode = false

        @Option(
            name: .customLong("xcode-certificate"),
            help: "The app's StoreKit Testing certificate (DER or PEM) that Xcode data must be signed by; repeatable.")
        var xcodeCertificate: [String] = []

        func run() async throws {
            let jws = String(decoding: try readInputFile(file, what: "JWS"), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            let payloadKind = try kind.map { name throws(CLIError) in
                guard let parsed = SignedDataVerifier.Kind(rawValue: name) else {
                    throw CLIError("--kind must be one of \(SignedDataVerifier.Kind.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                return parsed
            }
            let allEnvironments: Set<AppStoreEnvironment> = [.production, .sandbox, .testStore, .localTesting]
            let anchors = try root.map { path throws(CLIError) in
                let certificate = try CLIError.wrapping("root certificate \(path)") {
                    try TrustAnchor.loadCertificate(from: URL(fileURLWithPath: path))
                }
                return TrustAnchor(certificate: certificate, environments: allEnvironments)
            }
            // Production needs the app's Apple ID (as in Apple's library); asked for without one, the
            // verifier refuses the configuration, and by default it is left out.
            var environments =
                environment.isEmpty
                ? allEnvironments.filter { $0 != .production || appAppleId != nil }
                : Set(environment.map(AppStoreEnvironment.init(rawValue:)))
            if xcode { environments.insert(.xcode) }
            var configuration = SignedDataVerifier.Configuration(
                anchors: anchors.isEmpty ? [AppleRootCertificates.anchor] : anchors,
                bundleId: bundleId, appAppleId: appAppleId, environments: environments
            )
            configuration.allowsXcode = xcode
            configuration.xcodeCertificates = try xcodeCertificate.map { path throws(CLIError) in
                try CLIError.wrapping("StoreKit Testing certificate \(path)") { try TrustAnchor.loadCertificate(from: URL(fileURLWithPath: path)) }
            }
            if let at {
                let clock = Date(timeIntervalSince1970: TimeInterval(at))
                configuration.now = { clock }
            }
            let verifier = try CLIError.wrapping("configuration") { try SignedDataVerifier(configuration: configuration) }
            do {
                let payload = try await verifier.verifyPayload(jws, kind: payloadKind)
                print(String(decoding: payload, as: UTF8.self))
            } catch {
                print("error: \(error)")
                throw ExitCode(1)
            }
        }
    }
}
