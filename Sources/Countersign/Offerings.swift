import Foundation

/// The app's offerings, from `GET /v1/subscribers/{id}/offerings`.
public struct Offerings: Sendable, Hashable {
    public struct Package: Sendable, Hashable {
        public let identifier: String
        public let productIdentifier: String
    }

    public struct Offering: Sendable, Hashable {
        public let identifier: String
        public let packages: [Package]
    }

    public let all: [String: Offering]
    public let currentOfferingID: String?
    public let verification: VerificationResult

    public var current: Offering? { currentOfferingID.flatMap { all[$0] } }

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
