import Foundation

/// An app's web purchases through Stripe (docs/stripe.md): where its Stripe account is, how the
/// server authenticates to it and to its webhooks, and which Stripe prices are which of the app's
/// products. A subscription is never taken on the client's word: the server reads it from
/// Stripe's API with the secret key.
public struct StripeSettings: Codable, Sendable, Hashable {
    /// The account's secret API key (`sk_live_…`, `sk_test_…`, or a restricted `rk_…` key that can
    /// read subscriptions, checkout sessions, invoices and charges) …
    public var secretKey: String?
    /// … or the name of the environment variable that holds it (kept out of the file).
    public var secretKeyEnvironmentVariable: String?
    /// The endpoint's signing secrets (`whsec_…`): an event signed with any of them is taken,
    /// so a secret can be rolled by adding the new one, then removing the old.
    public var webhookSecrets: [String]
    /// Stripe's API; `https://api.stripe.com` when unset (tests point it at a stand-in).
    public var apiBaseURL: String?
    /// The Stripe account (`acct_…`) the app sells through. When set, an event that names
    /// another account is refused.
    public var account: String?
    /// Stripe price (`price_…`), plan or product (`prod_…`) id → the app's product id. A
    /// subscription of anything not listed here is refused.
    public var products: [String: String]
    /// The subscription metadata key that names the app user id, for subscriptions created
    /// without a post from the app (`app_user_id` when unset).
    public var appUserIdMetadataKey: String?
    /// The customer portal link CustomerInfo gives as a Stripe subscription's `management_url`.
    public var customerPortalURL: String?
    /// The custom URL scheme of the app's redemption links (`<scheme>://redeem_web_purchase?
    /// redemption_token=…`), which the app registers; `cs-` and 10 hex digits of the app id's
    /// SHA-256 when unset (RevenueCat's are `rc-` and 10 hex digits).
    public var redemptionLinkScheme: String?

    public init(secretKey: String? = nil, webhookSecrets: [String], apiBaseURL: String? = nil, products: [String: String]) {
        self.secretKey = secretKey
        self.webhookSecrets = webhookSecrets
        self.apiBaseURL = apiBaseURL
        self.products = products
    }

    public static let defaultAPIBaseURL = "https://api.stripe.com"
    public static let defaultAppUserIdMetadataKey = "app_user_id"

    public var baseURL: String { apiBaseURL ?? Self.defaultAPIBaseURL }
    public var metadataKey: String { appUserIdMetadataKey ?? Self.defaultAppUserIdMetadataKey }

    /// The secret key, from the file or the environment; nil when neither has one.
    public func resolvedSecretKey(environment: [String: String] = ProcessInfo.processInfo.environment) -> String? {
        if let secretKey { return secretKey }
        return secretKeyEnvironmentVariable.flatMap { environment[$0] }.flatMap { $0.isEmpty ? nil : $0 }
    }

    /// Checks the settings of `app` at start; throws a message naming what is wrong.
    public func validate(app: AppConfiguration, environment: [String: String] = ProcessInfo.processInfo.environment) throws(ConfigurationError) {
        let name = "app '\(app.id)': stripe"
        guard (secretKey == nil) != (secretKeyEnvironmentVariable == nil) else {
            throw ConfigurationError("\(name) needs one of secretKey or secretKeyEnvironmentVariable")
        }
        guard let key = resolvedSecretKey(environment: environment) else {
            throw ConfigurationError("\(name).secretKeyEnvironmentVariable names \(secretKeyEnvironmentVariable ?? "") which is not set")
        }
        guard key.hasPrefix("sk_") || key.hasPrefix("rk_"), key.utf8.count <= 255, Self.isToken(key) else {
            throw ConfigurationError("\(name) secret key must be a Stripe secret or restricted key (sk_… or rk_…)")
        }
        guard !webhookSecrets.isEmpty, webhookSecrets.allSatisfy({ $0.hasPrefix("whsec_") && $0.utf8.count > 6 && Self.isToken($0) }) else {
            throw ConfigurationError("\(name).webhookSecrets must list one or more endpoint signing secrets (whsec_…)")
        }
        guard let url = URL(string: baseURL), ["https", "http"].contains(url.scheme ?? ""), url.host != nil, !baseURL.hasSuffix("/") else {
            throw ConfigurationError("\(name).apiBaseURL must be an http(s) URL without a trailing slash, like https://api.stripe.com")
        }
        if let account, !(account.hasPrefix("acct_") && Self.isToken(account)) {
            throw ConfigurationError("\(name).account must be a Stripe account id (acct_…)")
        }
        guard !products.isEmpty else { throw ConfigurationError("\(name).products must map at least one Stripe price to a product") }
        for (stripeId, productId) in products {
            guard Self.isToken(stripeId) else { throw ConfigurationError("\(name).products: '\(stripeId)' is not a Stripe id") }
            guard let product = app.product(productId) else {
                throw ConfigurationError("\(name).products['\(stripeId)'] names '\(productId)', which the app does not configure")
            }
            guard product.type == .autoRenewable else {
                throw ConfigurationError("\(name).products['\(stripeId)'] names '\(productId)', which is not an auto-renewable subscription")
            }
        }
        if let key = appUserIdMetadataKey, key.isEmpty || key.utf8.count > 40 {
            throw ConfigurationError("\(name).appUserIdMetadataKey must be 1 to 40 characters (Stripe's limit for a metadata key)")
        }
        if let portal = customerPortalURL, URL(string: portal)?.scheme != "https" {
            throw ConfigurationError("\(name).customerPortalURL must be an https URL")
        }
        if let scheme = redemptionLinkScheme, !Self.isURLScheme(scheme) || ["http", "https"].contains(scheme.lowercased()) {
            throw ConfigurationError(
                "\(name).redemptionLinkScheme must be a custom URL scheme (a letter, then letters, digits, '+', '-' or '.'; at most 64)")
        }
    }

    /// Whether `text` is a URL scheme (RFC 3986: a letter, then letters, digits, `+`, `-`, `.`).
    static func isURLScheme(_ text: String) -> Bool {
        guard let first = text.utf8.first, text.utf8.count <= 64, (65...90).contains(first) || (97...122).contains(first) else { return false }
        return text.utf8.allSatisfy {
            ($0 >= 48 && $0 <= 57) || ($0 >= 65 && $0 <= 90) || ($0 >= 97 && $0 <= 122) || $0 == 43 || $0 == 45 || $0 == 46
        }
    }

    /// Whether `text` is a Stripe id or key: letters, digits and underscores, 1 to 255 of them.
    public static func isToken(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.count <= 255
            && text.utf8.allSatisfy { ($0 >= 48 && $0 <= 57) || ($0 >= 65 && $0 <= 90) || ($0 >= 97 && $0 <= 122) || $0 == 95 }
    }
}
