import Foundation

/// What a package stands for, read from its identifier as RevenueCat does (`$cs_monthly`, or
/// RevenueCat's own `$rc_monthly`); any other identifier is `custom`.
public enum PackageType: String, Sendable, Hashable, CaseIterable {
    case unknown, custom, lifetime, annual, sixMonth, threeMonth, twoMonth, monthly, weekly

    init(identifier: String) {
        let prefixes = ["$cs_", "$rc_"]
        guard let prefix = prefixes.first(where: identifier.hasPrefix) else {
            self = identifier.isEmpty ? .unknown : .custom
            return
        }
        switch identifier.dropFirst(prefix.count) {
        case "lifetime": self = .lifetime
        case "annual": self = .annual
        case "six_month": self = .sixMonth
        case "three_month": self = .threeMonth
        case "two_month": self = .twoMonth
        case "monthly": self = .monthly
        case "weekly": self = .weekly
        default: self = .custom
        }
    }
}

/// The app's offerings, from `GET /v1/subscribers/{id}/offerings`.
public struct Offerings: Sendable, Hashable {
    public struct Package: Sendable, Hashable {
        public let identifier: String
        /// The product, as the store describes it (packages whose product the store does not
        /// know are left out, as RevenueCat does).
        public let storeProduct: StoreProduct
        public let offeringIdentifier: String

        public var packageType: PackageType { PackageType(identifier: identifier) }
        public var productIdentifier: String { storeProduct.productIdentifier }
        public var localizedPriceString: String { storeProduct.localizedPriceString }
        public var localizedIntroductoryPriceString: String? { storeProduct.introductoryDiscount?.localizedPriceString }
    }

    public struct Offering: Sendable, Hashable {
        public let identifier: String
        /// The offering's description on the server (RevenueCat's name).
        public let serverDescription: String
        /// The packages in the order the server lists them.
        public let packages: [Package]
        /// The metadata object as the server sent it (JSON), kept whole so any value reads back.
        let metadataJSON: Data

        /// Free-form values configured for the offering, any JSON (strings, numbers, booleans,
        /// arrays, objects), as RevenueCat's `[String: Any]`; empty when none or null.
        public var metadata: [String: Any] {
            (try? JSONSerialization.jsonObject(with: metadataJSON) as? [String: Any]) ?? [:]
        }

        /// The metadata value for `key` as a `T`, else `default` (RevenueCat's accessor).
        public func getMetadataValue<T>(for key: String, default: T) -> T {
            metadata[key] as? T ?? `default`
        }

        /// The metadata value for `key` decoded as a `T`; nil when there is none or it does not
        /// decode (RevenueCat's accessor: an object or array is decoded from its JSON with keys
        /// converted from snake case, any other value is taken as it is when it is a `T`).
        public func getMetadataValue<T: Decodable>(for key: String) -> T? {
            guard let value = metadata[key] else { return nil }
            if JSONSerialization.isValidJSONObject(value), let json = try? JSONSerialization.data(withJSONObject: value) {
                let decoder = JSONDecoder()
                decoder.keyDecodingStrategy = .convertFromSnakeCase
                return try? decoder.decode(T.self, from: json)
            }
            return value as? T
        }

        /// The packages in the order the server lists them, as RevenueCat names it.
        public var availablePackages: [Package] { packages }

        public func package(identifier: String) -> Package? { packages.first { $0.identifier == identifier } }
        public subscript(identifier: String) -> Package? { package(identifier: identifier) }

        public var lifetime: Package? { first(.lifetime) }
        public var annual: Package? { first(.annual) }
        public var sixMonth: Package? { first(.sixMonth) }
        public var threeMonth: Package? { first(.threeMonth) }
        public var twoMonth: Package? { first(.twoMonth) }
        public var monthly: Package? { first(.monthly) }
        public var weekly: Package? { first(.weekly) }

        private func first(_ type: PackageType) -> Package? { packages.first { $0.packageType == type } }
    }

    public let all: [String: Offering]
    public let currentOfferingID: String?
    public let verification: VerificationResult

    public var current: Offering? { currentOfferingID.flatMap { all[$0] } }

    public subscript(identifier: String) -> Offering? { all[identifier] }

    public func offering(identifier: String) -> Offering? { all[identifier] }

    /// Reads the server's answer; `products` are the store's products by id. Fields RevenueCat
    /// adds for its own UI (`paywall`, …) are ignored; a metadata value may be any JSON.
    init(answer body: Data, verification: VerificationResult, products: [String: StoreProduct]) throws {
        let wire = try JSONDecoder().decode(Wire.self, from: body)
        // The metadata objects, by offering, re-serialized whole (Codable reads no `Any`).
        var metadata: [String: Data] = [:]
        if let object = try JSONSerialization.jsonObject(with: body) as? [String: Any], let offerings = object["offerings"] as? [[String: Any]] {
            for offering in offerings {
                guard let id = offering["identifier"] as? String, let values = offering["metadata"] as? [String: Any] else { continue }
                metadata[id] = try JSONSerialization.data(withJSONObject: values, options: [.sortedKeys])
            }
        }
        all = Dictionary(
            wire.offerings.map { offering in
                (
                    offering.identifier,
                    Offering(
                        identifier: offering.identifier, serverDescription: offering.description ?? "",
                        packages: offering.packages.compactMap { package in
                            products[package.platform_product_identifier].map {
                                Package(identifier: package.identifier, storeProduct: $0, offeringIdentifier: offering.identifier)
                            }
                        },
                        metadataJSON: metadata[offering.identifier] ?? Data("{}".utf8)
                    )
                )
            }, uniquingKeysWith: { first, _ in first })
        currentOfferingID = wire.current_offering_id
        self.verification = verification
    }

    /// The server's answer as sent.
    struct Wire: Decodable {
        struct Offering: Decodable {
            struct Package: Decodable {
                var identifier: String
                var platform_product_identifier: String
            }

            var identifier: String
            var packages: [Package]
            var description: String?
        }

        var current_offering_id: String?
        var offerings: [Offering]

        var productIdentifiers: [String] {
            var seen = Set<String>()
            return offerings.flatMap(\.packages).map(\.platform_product_identifier).filter { seen.insert($0).inserted }
        }
    }
}

/// Product id → entitlement ids, from `GET /v1/product_entitlement_mapping`.
struct ProductEntitlementMapping: Sendable {
    let entitlements: [String: [String]]

    init(answer body: Data) throws {
        struct Wire: Decodable {
            struct Product: Decodable {
                var entitlements: [String]
            }

            var product_entitlement_mapping: [String: Product]
        }
        entitlements = try JSONDecoder().decode(Wire.self, from: body).product_entitlement_mapping.mapValues(\.entitlements)
    }
}

/// RevenueCat's top-level names: `ForEach(offering.availablePackages)` and `let package: Package`
/// compile as they do against RevenueCat.
public typealias Package = Offerings.Package
public typealias Offering = Offerings.Offering

extension Offerings.Package: Identifiable {
    /// The package's identifier, as RevenueCat's `Package.id`.
    public var id: String { identifier }
}

extension Offerings.Offering: Identifiable {
    public var id: String { identifier }
}
