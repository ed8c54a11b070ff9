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
        public let productIdentifier: String

        public var packageType: PackageType { PackageType(identifier: identifier) }
    }

    public struct Offering: Sendable, Hashable {
        public let identifier: String
        public let packages: [Package]

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

    init(answer body: Data, verification: VerificationResult) throws {
        struct Wire: Decodable {
            struct Offering: Decodable {
                struct Package: Decodable {
                    var identifier: String
                    var platform_product_identifier: String
                }

                var identifier: String
                var packages: [Package]
            }

            var current_offering_id: String?
            var offerings: [Offering]
        }
        let wire = try JSONDecoder().decode(Wire.self, from: body)
        all = Dictionary(wire.offerings.map { offering in
            (offering.identifier, Offering(identifier: offering.identifier, packages: offering.packages.map {
                Package(identifier: $0.identifier, productIdentifier: $0.platform_product_identifier)
            }))
        }, uniquingKeysWith: { first, _ in first })
        currentOfferingID = wire.current_offering_id
        self.verification = verification
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
