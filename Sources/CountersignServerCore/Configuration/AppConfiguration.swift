import CountersignCore
import Crypto
import Foundation

/// One app a deployment serves: its identity, keys, accepted store environments and catalogue.
///
/// Stored in `countersign.json` (see docs/operations.md); environment names are App Store's
/// (`Production`, `Sandbox`, `Xcode`) plus `TestStore`.
public struct AppConfiguration: Codable, Sendable, Hashable {
    public var id: String
    public var bundleId: String
    /// App Store app id, checked on Production data.
    public var appAppleId: Int64?
    /// Keys shipped in the app: authorize public endpoints only.
    public var publicApiKeys: [String]
    /// Keys for your backend: authorize the admin API only.
    public var secretApiKeys: [String]
    public var environments: [String]
    public var transferBehavior: TransferBehavior
    public var products: [Product]
    public var offerings: [Offering]
    /// For apps that list `Xcode`: the StoreKit Testing certificates (base64 DER, as Xcode
    /// exports them) its data must be signed by. Required with `Xcode`.
    public var storeKitTestingCertificates: [String]?
    /// The app's In-App Purchase key from App Store Connect: the server signs promotional
    /// offers with it (and, later, calls the App Store Server API).
    public var inAppPurchaseKey: InAppPurchaseKey?
    /// Accept legacy PKCS#7 app receipts in `POST /v1/receipts` (apps older than StoreKit 2).
    /// Off unless true: a receipt is resolved through the App Store Server API, which needs
    /// ``inAppPurchaseKey``, and is trusted only once its signature chains to Apple's root.
    public var legacyReceipts: Bool?
    /// Endpoints of the app's backend that hear about every purchase, renewal, refund, expiry
    /// and transfer (docs/webhooks.md).
    public var webhooks: [Webhook]?
    /// The store's commission as a fraction of the price (0.3, Apple's standard rate, when
    /// unset; 0.15 for the Small Business Program): webhook events' `commission_percentage`,
    /// and `takehome_percentage` is what is left.
    public var commissionPercentage: Double?
    /// The commission from a day on (UTC), in order: joining Apple's Small Business Program
    /// (0.15) or leaving it. Before the first, ``commissionPercentage`` applies.
    public var commissionChanges: [CommissionChange]?
    /// US dollars per unit of each currency, as of a date the operator chose: webhook events'
    /// `price` (in USD). Never fetched at run time; a currency missing here gives a null `price`.
    public var usdExchangeRates: ExchangeRates?
    /// Earlier tables of rates, oldest first: each applies from its `asOf` day until the next
    /// one's, and ``usdExchangeRates`` from its own day on. A price is converted at the table of
    /// its day (the oldest for days before any); a currency missing from that table is missing.
    public var usdExchangeRateHistory: [ExchangeRates]?
    /// How the server answers Apple's `CONSUMPTION_REQUEST` (a customer asked Apple for a
    /// refund); not answered when unset. Needs ``inAppPurchaseKey`` (docs/webhooks.md, "Refund
    /// requests").
    public var refundRequests: RefundRequests?
    /// Web purchases through Stripe (docs/stripe.md); none when unset.
    public var stripe: StripeSettings?
    /// Entitlement tokens for the app's own backend; none are issued when unset.
    public var entitlementTokens: EntitlementTokenSettings?
    /// The verification policy stated in the app's signed answers; `none` when unset.
    public var verificationPolicy: VerificationPolicySettings?

    /// RevenueCat's "Handling of refund requests": the preference sent with the consumption
    /// information Apple asks for. Setting it states that the app's terms obtain the customer's
    /// consent to share that information (Apple refuses an answer without it).
    public struct RefundRequests: Codable, Sendable, Hashable {
        /// `grant` (prefer that Apple grants the refund), `decline`, or `noPreference` (send the
        /// consumption information and let Apple decide). A customer's
        /// `$appleRefundHandlingPreference` attribute overrides it.
        public var preference: Preference
        /// Whether the app offers a free sample or trial, or describes the content, before the
        /// purchase (Apple's `sampleContentProvided`). False when unset.
        public var sampleContentProvided: Bool?

        public enum Preference: String, Codable, Sendable, Hashable {
            case grant, decline, noPreference
        }

        public init(preference: Preference, sampleContentProvided: Bool? = nil) {
            self.preference = preference
            self.sampleContentProvided = sampleContentProvided
        }
    }

    /// A dated table of exchange rates to the US dollar.
    public struct ExchangeRates: Codable, Sendable, Hashable {
        /// The day the rates were taken (`YYYY-MM-DD`), for the record.
        public var asOf: String
        /// ISO 4217 code to US dollars per unit (`{"EUR": 1.08}`).
        public var usdPerUnit: [String: Double]

        public init(asOf: String, usdPerUnit: [String: Double]) {
            self.asOf = asOf
            self.usdPerUnit = usdPerUnit
        }

        /// The first instant of its `asOf` day; nil for one that is not a day.
        public var fromMilliseconds: Int64? { AppConfiguration.dayStart(asOf) }
    }

    /// Every table of rates, oldest first (``usdExchangeRateHistory``, then ``usdExchangeRates``),
    /// each with the instant it applies from.
    public var exchangeRateTables: [(fromMilliseconds: Int64, usdPerUnit: [String: Double])] {
        ((usdExchangeRateHistory ?? []) + (usdExchangeRates.map { [$0] } ?? [])).compactMap { table in
            table.fromMilliseconds.map { ($0, table.usdPerUnit) }
        }
    }

    /// US dollars per unit of `currency` at `milliseconds`: from the table of its day; nil when
    /// that table has none.
    public func usdPerUnit(_ currency: String, atMilliseconds milliseconds: Int64) -> Double? {
        let tables = exchangeRateTables
        return (tables.last { $0.fromMilliseconds <= milliseconds } ?? tables.first)?.usdPerUnit[currency]
    }

    /// The first instant of a `YYYY-MM-DD` day (UTC) in milliseconds since 1970; nil for anything
    /// else.
    static func dayStart(_ day: String) -> Int64? {
        guard day.wholeMatch(of: /[0-9]{4}-[0-9]{2}-[0-9]{2}/) != nil, let date = ISO8601DateFormatter().date(from: day + "T00:00:00Z") else {
            return nil
        }
        return Int64(date.timeIntervalSince1970) * 1000
    }

    /// Apple's standard commission.
    public static let standardCommission = 0.3

    /// A commission that applies from a day on.
    public struct CommissionChange: Codable, Sendable, Hashable {
        /// `YYYY-MM-DD`, UTC: the first day it applies to (by the purchase's date).
        public var from: String
        /// A fraction from 0 to 1.
        public var percentage: Double

        public init(from: String, percentage: Double) {
            self.from = from
            self.percentage = percentage
        }

        /// The first instant it applies to, in milliseconds since 1970; nil for a `from` that is
        /// not a day.
        public var fromMilliseconds: Int64? { AppConfiguration.dayStart(from) }
    }

    /// The commission on a purchase made `milliseconds` after 1970: the last change from on or
    /// before its day, else ``commissionPercentage``, else Apple's standard rate.
    public func commission(atMilliseconds milliseconds: Int64) -> Double {
        var rate = commissionPercentage ?? Self.standardCommission
        for change in commissionChanges ?? [] {
            guard let from = change.fromMilliseconds, from <= milliseconds else { break }
            rate = change.percentage
        }
        return rate
    }

    /// One endpoint events are posted to.
    public struct Webhook: Codable, Sendable, Hashable {
        /// `https://…` (or `http://…`) where each event is posted.
        public var url: String
        /// Sent as the `Authorization` header's value when set (RevenueCat's only protection; the
        /// signature is ours).
        public var authorization: String?
        /// The delays between attempts, in seconds: one more attempt than delays. Default
        /// ``defaultRetrySchedule``.
        public var retryScheduleSeconds: [Double]?
        /// Only these event types are sent (RevenueCat's names, `INITIAL_PURCHASE`…); all when unset.
        public var eventTypes: [String]?
        /// Only events of these environments are sent (`PRODUCTION`, `SANDBOX`); both when unset.
        public var environments: [String]?

        /// Five attempts over about two and a half hours: 1 minute, 5 minutes, 30 minutes and
        /// 2 hours after the one before.
        public static let defaultRetrySchedule: [Double] = [60, 300, 1_800, 7_200]

        public init(
            url: String, authorization: String? = nil, retryScheduleSeconds: [Double]? = nil, eventTypes: [String]? = nil,
            environments: [String]? = nil
        ) {
            self.url = url
            self.authorization = authorization
            self.retryScheduleSeconds = retryScheduleSeconds
            self.eventTypes = eventTypes
            self.environments = environments
        }

        public var retrySchedule: [Double] { retryScheduleSeconds ?? Self.defaultRetrySchedule }

        /// Whether an event of `type` in `environment` (RevenueCat's `PRODUCTION` or `SANDBOX`;
        /// nil for a `TEST` event, which has none) goes to this endpoint.
        public func wants(type: String, environment: String?) -> Bool {
            if let eventTypes, !eventTypes.contains(type) { return false }
            if let environments, let environment, !environments.contains(environment) { return false }
            return true
        }

        /// Refuses what could not be delivered or would be read two ways: a URL that is not an
        /// absolute http(s) URL with a host, a fragment or credentials in it, a header value with
        /// a line break, a schedule with a negative, non-finite or day-long delay.
        func validate(app: String) throws(ConfigurationError) {
            let name = "app '\(app)' webhook '\(url)'"
            guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(),
                scheme == "https" || scheme == "http", let host = components.host, !host.isEmpty
            else { throw ConfigurationError("\(name): url must be an absolute http:// or https:// URL") }
            guard components.fragment == nil, components.user == nil, components.password == nil else {
                throw ConfigurationError("\(name): url must not carry a fragment or credentials (use authorization)")
            }
            if let authorization, authorization.contains(where: { $0 == "\r" || $0 == "\n" || $0 == "\0" }) || authorization.isEmpty {
                throw ConfigurationError("\(name): authorization must be a non-empty header value on one line")
            }
            if let schedule = retryScheduleSeconds, schedule.contains(where: { !$0.isFinite || $0 < 0 || $0 > 86_400 }) {
                throw ConfigurationError("\(name): retryScheduleSeconds must be delays from 0 to 86400 seconds")
            }
            if let eventTypes, eventTypes.isEmpty || eventTypes.contains(where: { !Self.eventTypeNames.contains($0) }) {
                throw ConfigurationError("\(name): eventTypes must list event types from: \(Self.eventTypeNames.joined(separator: ", "))")
            }
            if let environments, environments.isEmpty || environments.contains(where: { $0 != "PRODUCTION" && $0 != "SANDBOX" }) {
                throw ConfigurationError("\(name): environments must list PRODUCTION, SANDBOX or both")
            }
        }

        /// The event types the server sends (RevenueCat's names).
        public static let eventTypeNames = [
            "INITIAL_PURCHASE", "RENEWAL", "CANCELLATION", "UNCANCELLATION", "NON_RENEWING_PURCHASE", "EXPIRATION", "BILLING_ISSUE",
            "PRODUCT_CHANGE", "TRANSFER", "SUBSCRIPTION_EXTENDED", "REFUND_REVERSED", "TEST",
        ]
    }

    public struct InAppPurchaseKey: Codable, Sendable, Hashable {
        public var keyId: String
        public var issuerId: String
        /// The `.p8` file: an absolute path, or relative to the data directory.
        public var privateKeyFile: String

        public init(keyId: String, issuerId: String, privateKeyFile: String) {
            self.keyId = keyId
            self.issuerId = issuerId
            self.privateKeyFile = privateKeyFile
        }
    }

    /// What happens when a purchase already recorded for one user is posted by another.
    public enum TransferBehavior: String, Codable, Sendable, Hashable {
        /// Move the purchase to the user who posted it (default).
        case transfer
        /// Refuse with a clear error; nothing changes.
        case keepWithOriginal
        /// Move it only if the current owner has no active entitlement from it.
        case transferIfNoActive
    }

    public struct Product: Codable, Sendable, Hashable {
        public var id: String
        public var type: ProductKind
        public var entitlements: [String]
        /// What the test store shows for the product, as StoreKit reads it from App Store
        /// Connect; all optional (the test store falls back to the id and a zero price).
        public var displayName: String?
        public var description: String?
        /// The price as decimal text (`"9.99"`), so no binary rounding creeps in.
        public var price: String?
        /// ISO 4217 (`"USD"`).
        public var currency: String?
        /// ISO 8601 duration of one period (`P1W`, `P1M`, `P3M`, `P6M`, `P1Y`), for subscriptions.
        public var subscriptionPeriod: String?
        /// The subscription group: introductory offers are one per customer and group.
        public var subscriptionGroup: String?
        public var introductoryOffer: IntroductoryOffer?
        /// The promotional offer identifiers set up in App Store Connect for the subscription;
        /// the server signs no other.
        public var promotionalOffers: [String]?

        public init(id: String, type: ProductKind, entitlements: [String]) {
            self.id = id
            self.type = type
            self.entitlements = entitlements
        }
    }

    /// A subscription's introductory offer (the type the test store's product list carries).
    public typealias IntroductoryOffer = CountersignCore.IntroductoryOffer

    /// The kinds of product an app sells, named as in the configuration file.
    public enum ProductKind: String, Codable, Sendable, Hashable {
        case autoRenewable
        case nonRenewing
        case nonConsumable
        case consumable
    }

    public struct Offering: Codable, Sendable, Hashable {
        public var id: String
        public var isCurrent: Bool
        public var packages: [Package]
        /// Free-form values the app reads (`Offering.metadata` and `getMetadataValue(for:)` in
        /// the SDK): any JSON, as RevenueCat's offering metadata.
        public var metadata: [String: MetadataValue]?

        public struct Package: Codable, Sendable, Hashable {
            public var id: String
            public var productId: String
        }
    }

    public func product(_ id: String) -> Product? {
        products.first { $0.id == id }
    }
}

extension AppConfiguration {
    /// The app a fresh data directory starts with: `demo`, bundle `com.example.demo`, the test
    /// store and Sandbox, products `pro_monthly`, `lifetime` (entitlement `pro`) and `coins_100`.
    public static func makeDemo() -> AppConfiguration {
        AppConfiguration(
            id: "demo",
            bundleId: "com.example.demo",
            appAppleId: nil,
            publicApiKeys: [APIKey.make(.public)],
            secretApiKeys: [APIKey.make(.secret)],
            environments: ["TestStore", "Sandbox"],
            transferBehavior: .transfer,
            products: [
                Product(id: "pro_monthly", type: .autoRenewable, entitlements: ["pro"]).described(
                    "Pro Monthly", "Every Pro feature, renewed each month", price: "9.99", period: "P1M", group: "pro",
                    intro: IntroductoryOffer(paymentMode: .freeTrial, period: "P1W", price: "0")
                ),
                Product(id: "lifetime", type: .nonConsumable, entitlements: ["pro"]).described(
                    "Pro for Life", "Every Pro feature, paid once", price: "49.99"
                ),
                Product(id: "coins_100", type: .consumable, entitlements: []).described("100 Coins", "A pouch of coins", price: "0.99"),
            ],
            offerings: [
                Offering(
                    id: "default", isCurrent: true,
                    packages: [
                        .init(id: "$cs_monthly", productId: "pro_monthly"),
                        .init(id: "$cs_lifetime", productId: "lifetime"),
                    ], metadata: ["headline": "Unlock every Pro feature"])
            ]
        )
    }
}

extension AppConfiguration.Product {
    /// The product with its store metadata set (priced in US dollars).
    public func described(
        _ name: String, _ description: String, price: String, period: String? = nil, group: String? = nil,
        intro: AppConfiguration.IntroductoryOffer? = nil
    ) -> Self {
        var product = self
        product.displayName = name
        product.description = description
        product.price = price
        product.currency = "USD"
        product.subscriptionPeriod = period
        product.subscriptionGroup = group
        product.introductoryOffer = intro
        return product
    }
}

/// API keys: a kind prefix and 24 random bytes, base64url.
public enum APIKey {
    public enum Kind: String, Sendable {
        case `public` = "cs_pub_"
        case secret = "cs_sec_"
    }

    public static func make(_ kind: Kind) -> String {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<24).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        let text = Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        return kind.rawValue + text
    }
}

/// A configuration that cannot be used, with what is wrong in it.
public struct ConfigurationError: Error, Hashable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// The deployment's configuration file, `countersign.json`.
public struct DeploymentConfiguration: Codable, Sendable, Hashable {
    public var apps: [AppConfiguration]
    /// For testing against a look-alike Apple PKI only: base64 DER roots trusted for Production
    /// and Sandbox data instead of the built-in Apple Root CA - G3. The server logs a warning.
    public var appleRootCertificates: [String]?
    /// For testing against a stand-in only: the base URL every App Store Server API call goes
    /// to instead of Apple's Production and Sandbox hosts. The server logs a warning.
    public var appStoreServerAPIURL: String?
    /// The `iss` of the deployment's entitlement tokens (default ``defaultIssuer``); your
    /// server's public URL is a good value.
    public var issuer: String?

    public static let defaultIssuer = "countersign"
    public var tokenIssuer: String { issuer ?? Self.defaultIssuer }

    public init(apps: [AppConfiguration], appleRootCertificates: [String]? = nil, appStoreServerAPIURL: String? = nil) {
        self.apps = apps
        self.appleRootCertificates = appleRootCertificates
        self.appStoreServerAPIURL = appStoreServerAPIURL
    }

    /// Writes the configuration (it holds secret API keys, so readable by the owner only).
    public func save(toDataDirectory directory: URL) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        try KeyFile.writePrivate(encoder.encode(self), to: DataDirectory(directory).configurationFile)
    }

    /// The configuration in `directory`, or nil when it has none yet.
    public static func load(fromDataDirectory directory: URL) throws -> DeploymentConfiguration? {
        let url = DataDirectory(directory).configurationFile
        guard FileManager.default.fileExists(atPath: url.path) else { return nil }
        return try load(from: url)
    }

    /// The configuration in a file that must exist.
    public static func load(from url: URL) throws -> DeploymentConfiguration {
        guard FileManager.default.fileExists(atPath: url.path) else { throw ConfigurationError("\(url.path): no such configuration file") }
        return try decode(Data(contentsOf: url), source: url.path)
    }

    /// Reads a configuration from its bytes. A repeated key (after unescaping), invalid UTF-8 or
    /// a lone surrogate escape is refused: `JSONDecoder` alone would keep one of two values
    /// silently, and the file holds the keys and environments a deployment trusts.
    public static func decode(_ data: Data, source: String) throws(ConfigurationError) -> DeploymentConfiguration {
        if let problem = JSONSyntax.check(data, topLevel: .object) {
            throw ConfigurationError("\(source) is not a valid configuration: \(problem)")
        }
        let configuration: DeploymentConfiguration
        do {
            configuration = try JSONDecoder().decode(DeploymentConfiguration.self, from: data)
        } catch let error as DecodingError {
            throw ConfigurationError("\(source) is not a valid configuration: \(error.shortDescription)")
        } catch {
            throw ConfigurationError("\(source) is not a valid configuration: \(error)")
        }
        do throws(ConfigurationError) {
            try configuration.validateStoreMetadata()
            if let issuer = configuration.issuer, !EntitlementToken.isUsableText(issuer) {
                throw ConfigurationError("issuer must be 1 to 256 characters without control characters")
            }
            for app in configuration.apps {
                if let commission = app.commissionPercentage, !(0...1).contains(commission) {
                    throw ConfigurationError("app '\(app.id)': commissionPercentage must be a fraction from 0 to 1 (0.3 is 30 %)")
                }
                var previous: Int64?
                for change in app.commissionChanges ?? [] {
                    guard let from = change.fromMilliseconds,
                        ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: Double(from) / 1000)).hasPrefix(change.from)
                    else {
                        throw ConfigurationError("app '\(app.id)': commissionChanges from '\(change.from)' must be a day like 2026-01-01")
                    }
                    guard (0...1).contains(change.percentage) else {
                        throw ConfigurationError("app '\(app.id)': commissionChanges percentage must be a fraction from 0 to 1 (0.15 is 15 %)")
                    }
                    guard previous.map({ $0 < from }) ?? true else {
                        throw ConfigurationError("app '\(app.id)': commissionChanges must be in order of their days, each day once")
                    }
                    previous = from
                }
                var lastRates: Int64?
                let tables =
                    (app.usdExchangeRateHistory ?? []).map { ("usdExchangeRateHistory", $0) }
                    + (app.usdExchangeRates.map { [("usdExchangeRates", $0)] } ?? [])
                for (name, rates) in tables {
                    guard let from = rates.fromMilliseconds else {
                        throw ConfigurationError("app '\(app.id)': \(name) asOf must be a day like 2026-11-01")
                    }
                    guard lastRates.map({ $0 < from }) ?? true else {
                        throw ConfigurationError(
                            "app '\(app.id)': usdExchangeRateHistory must be in order of their asOf days, each day once and before usdExchangeRates'")
                    }
                    lastRates = from
                    for (currency, rate) in rates.usdPerUnit where currency.wholeMatch(of: /[A-Z]{3}/) == nil || !rate.isFinite || rate <= 0 {
                        throw ConfigurationError("app '\(app.id)': \(name) usdPerUnit['\(currency)'] must be a positive rate for an ISO 4217 code")
                    }
                }
                try app.entitlementTokens?.validate(app: app.id)
                try app.stripe?.validate(app: app)
                try app.verificationPolicy?.validate(app: app.id)
                if app.refundRequests != nil && app.inAppPurchaseKey == nil {
                    throw ConfigurationError(
                        "app '\(app.id)': refundRequests needs inAppPurchaseKey (the answer goes to the App Store Server API)")
                }
                var urls = Set<String>()
                for webhook in app.webhooks ?? [] {
                    try webhook.validate(app: app.id)
                    guard urls.insert(webhook.url).inserted else {
                        throw ConfigurationError("app '\(app.id)' lists webhook '\(webhook.url)' twice")
                    }
                }
            }
        } catch {
            throw ConfigurationError("\(source) is not a valid configuration: \(error.description)")
        }
        return configuration
    }
}

extension DecodingError {
    /// The failing field path and what was wrong, in one line.
    public var shortDescription: String {
        switch self {
        case .keyNotFound(let key, let context):
            return "missing '\((context.codingPath + [key]).map(\.stringValue).joined(separator: "."))'"
        case .typeMismatch(_, let context), .valueNotFound(_, let context), .dataCorrupted(let context):
            let path = context.codingPath.map(\.stringValue).joined(separator: ".")
            return path.isEmpty ? context.debugDescription : "'\(path)': \(context.debugDescription)"
        @unknown default:
            return "\(self)"
        }
    }
}
