import Foundation

// Request and answer bodies of the API besides CustomerInfo, defined once for the server, the
// SDK and the CLI.

/// `POST /v1/subscribers/identify` answers the new user's CustomerInfo plus whether the user
/// was created by this call.
public struct IdentifyResult: Codable, Sendable, Hashable {
    public var created: Bool

    public init(created: Bool) {
        self.created = created
    }
}

/// The answer of `POST /v1/test_store/purchases`: a transaction signed by the test store, to
/// post to `/v1/receipts`.
public struct TestPurchaseAnswer: Codable, Sendable, Hashable {
    public var signedTransaction: String
    public var transactionId: String
    public var productId: String

    public init(signedTransaction: String, transactionId: String, productId: String) {
        self.signedTransaction = signedTransaction
        self.transactionId = transactionId
        self.productId = productId
    }

    enum CodingKeys: String, CodingKey {
        case signedTransaction = "signed_transaction", transactionId = "transaction_id", productId = "product_id"
    }
}

/// The body of `POST /v1/diagnostics/verification_failures`: what the SDK reports of the
/// signature verification failures it saw, counted.
public struct VerificationFailureReport: Codable, Sendable, Hashable {
    public struct Failure: Codable, Sendable, Hashable {
        public var reason: String
        public var path: String
        public var mode: String
        public var sdkVersion: String?
        /// The app's own version (`CFBundleShortVersionString`), when it has one.
        public var appVersion: String?
        public var appUserId: String?
        public var count: Int?

        public init(
            reason: String, path: String, mode: String, sdkVersion: String? = nil, appVersion: String? = nil, appUserId: String? = nil,
            count: Int? = nil
        ) {
            self.reason = reason
            self.path = path
            self.mode = mode
            self.sdkVersion = sdkVersion
            self.appVersion = appVersion
            self.appUserId = appUserId
            self.count = count
        }

        enum CodingKeys: String, CodingKey {
            case reason, path, mode, sdkVersion = "sdk_version", appVersion = "app_version", appUserId = "app_user_id", count
        }
    }

    public var failures: [Failure]

    public init(failures: [Failure]) {
        self.failures = failures
    }

    /// A version as reports carry it: 1 to 32 letters, digits and `.` `-` `+` `_`.
    public static func isVersionText(_ text: String) -> Bool {
        (1...32).contains(text.utf8.count)
            && text.utf8.allSatisfy { byte in
                (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte) || ".-+_".utf8.contains(byte)
            }
    }
}

/// `GET /v1/test_store/products`: the app's products as the test store sells them (what
/// StoreKit would read from App Store Connect). Prices are decimal text.
public struct TestStoreProducts: Codable, Sendable, Hashable {
    public struct Product: Codable, Sendable, Hashable {
        public var identifier: String
        /// `autoRenewable`, `nonRenewing`, `nonConsumable` or `consumable`.
        public var type: String
        public var displayName: String
        public var description: String
        public var price: String
        public var currency: String
        public var subscriptionPeriod: String?
        public var subscriptionGroup: String?
        public var introductoryOffer: IntroductoryOffer?
        /// The subscription's promotional offer identifiers (charged the product's price here).
        public var promotionalOffers: [String]? = nil

        public init(
            identifier: String, type: String, displayName: String, description: String, price: String, currency: String,
            subscriptionPeriod: String?, subscriptionGroup: String?, introductoryOffer: IntroductoryOffer?
        ) {
            self.identifier = identifier
            self.type = type
            self.displayName = displayName
            self.description = description
            self.price = price
            self.currency = currency
            self.subscriptionPeriod = subscriptionPeriod
            self.subscriptionGroup = subscriptionGroup
            self.introductoryOffer = introductoryOffer
        }

        enum CodingKeys: String, CodingKey {
            case identifier, type, displayName = "display_name", description, price, currency
            case subscriptionPeriod = "subscription_period", subscriptionGroup = "subscription_group"
            case introductoryOffer = "introductory_offer"
            case promotionalOffers = "promotional_offers"
        }
    }

    public var products: [Product]

    public init(products: [Product]) {
        self.products = products
    }
}

/// `GET /v1/test_store/accounts/{store_account}/transactions?after=N`: the transactions a test
/// store account received after sequence N, oldest first (what StoreKit's `Transaction.updates`
/// delivers): renewals, refunds, approved Ask-to-Buy purchases, Family Sharing grants and
/// purchases made on another device.
public struct TestStoreFeed: Codable, Sendable, Hashable {
    public struct Entry: Codable, Sendable, Hashable {
        public var sequence: Int64
        public var signedTransaction: String

        public init(sequence: Int64, signedTransaction: String) {
            self.sequence = sequence
            self.signedTransaction = signedTransaction
        }

        enum CodingKeys: String, CodingKey {
            case sequence, signedTransaction = "signed_transaction"
        }
    }

    public var transactions: [Entry]

    public init(transactions: [Entry]) {
        self.transactions = transactions
    }
}

/// The answer of `POST /v1/test_store/purchase_requests`: an Ask-to-Buy purchase waiting for
/// approval (`POST /v1/admin/test_store/approve`).
public struct TestStorePendingAnswer: Codable, Sendable, Hashable {
    public var pendingId: String
    public var productId: String

    public init(pendingId: String, productId: String) {
        self.pendingId = pendingId
        self.productId = productId
    }

    enum CodingKeys: String, CodingKey {
        case pendingId = "pending_id", productId = "product_id"
    }
}

/// Whether a customer may get a product's introductory offer (RevenueCat's
/// `IntroEligibilityStatus`): App Store gives one introductory offer per customer and
/// subscription group, to customers who never subscribed in the group.
public enum IntroEligibilityStatus: String, Codable, Sendable, Hashable, CaseIterable {
    case unknown
    case ineligible
    case eligible
    case noIntroOfferExists = "no_intro_offer_exists"
}

/// The body of `POST /v1/subscribers/{app_user_id}/intro_eligibility`.
public struct IntroEligibilityRequest: Codable, Sendable, Hashable {
    public var productIdentifiers: [String]

    public init(productIdentifiers: [String]) {
        self.productIdentifiers = productIdentifiers
    }

    enum CodingKeys: String, CodingKey {
        case productIdentifiers = "product_identifiers"
    }
}

/// Its answer: each product asked for and the customer's eligibility for its introductory offer.
public struct IntroEligibilityAnswer: Codable, Sendable, Hashable {
    public var eligibility: [String: IntroEligibilityStatus]

    public init(eligibility: [String: IntroEligibilityStatus]) {
        self.eligibility = eligibility
    }
}

/// The body of `POST /v1/subscribers/{app_user_id}/promotional_offer`.
public struct PromotionalOfferRequest: Codable, Sendable, Hashable {
    public var productIdentifier: String
    public var offerIdentifier: String

    public init(productIdentifier: String, offerIdentifier: String) {
        self.productIdentifier = productIdentifier
        self.offerIdentifier = offerIdentifier
    }

    enum CodingKeys: String, CodingKey {
        case productIdentifier = "product_identifier", offerIdentifier = "offer_identifier"
    }
}

/// A promotional offer signed by the server with the app's In-App Purchase key, in both of
/// StoreKit's formats: the original signature fields and the compact JWS.
public struct PromotionalOfferAnswer: Codable, Sendable, Hashable {
    public var productIdentifier: String
    public var offerIdentifier: String
    public var keyIdentifier: String
    /// Lowercase UUID.
    public var nonce: String
    /// Milliseconds since 1970.
    public var timestamp: Int64
    /// The app account token the signature binds (the user's, lowercase).
    public var appAccountToken: String
    /// Base64 DER ECDSA P-256 signature.
    public var signature: String
    public var jws: String

    public init(
        productIdentifier: String, offerIdentifier: String, keyIdentifier: String, nonce: String, timestamp: Int64,
        appAccountToken: String, signature: String, jws: String
    ) {
        self.productIdentifier = productIdentifier
        self.offerIdentifier = offerIdentifier
        self.keyIdentifier = keyIdentifier
        self.nonce = nonce
        self.timestamp = timestamp
        self.appAccountToken = appAccountToken
        self.signature = signature
        self.jws = jws
    }

    enum CodingKeys: String, CodingKey {
        case productIdentifier = "product_identifier", offerIdentifier = "offer_identifier", keyIdentifier = "key_identifier"
        case nonce, timestamp, appAccountToken = "app_account_token", signature, jws
    }
}
