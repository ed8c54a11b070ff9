import CountersignCore
import Foundation

extension TransactionPayload {
    /// Decodes a transaction without the `Decodable` machinery: every purchase the server
    /// records decodes one, and the generic path cost as much as a third of the ECDSA check
    /// (BENCHMARKS.md, decision 16); that measurement is why this second decoder
    /// exists, over the same parsed ``JSONValue``. Tests hold it equal to the synthesized
    /// `Decodable` conformance on Apple's fixtures and on every minted transaction.
    static func decodeFast(from data: Data) throws -> TransactionPayload {
        let value: JSONValue
        do {
            value = try JSONValue.parse(data)
        } catch {
            throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "invalid JSON: \(error)"))
        }
        guard case .object(let fields) = value else {
            throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "a transaction is a JSON object"))
        }
        return try decodeFast(fields: fields)
    }

    static func decodeFast(fields: [String: JSONValue]) throws -> TransactionPayload {
        var payload = TransactionPayload()
        for (key, value) in fields {
            switch key {
            case "transactionId": payload.transactionId = try value.string(key)
            case "originalTransactionId": payload.originalTransactionId = try value.string(key)
            case "webOrderLineItemId": payload.webOrderLineItemId = try value.string(key)
            case "bundleId": payload.bundleId = try value.string(key)
            case "productId": payload.productId = try value.string(key)
            case "subscriptionGroupIdentifier": payload.subscriptionGroupIdentifier = try value.string(key)
            case "purchaseDate": payload.purchaseDate = try value.date(key)
            case "originalPurchaseDate": payload.originalPurchaseDate = try value.date(key)
            case "expiresDate": payload.expiresDate = try value.date(key)
            case "quantity": payload.quantity = try value.integer(key)
            case "type": payload.type = try value.open(key)
            case "appAccountToken": payload.appAccountToken = try value.string(key)
            case "inAppOwnershipType": payload.inAppOwnershipType = try value.open(key)
            case "signedDate": payload.signedDate = try value.date(key)
            case "revocationReason": payload.revocationReason = try value.integer(key)
            case "revocationDate": payload.revocationDate = try value.date(key)
            case "revocationType": payload.revocationType = try value.string(key)
            case "revocationPercentage": payload.revocationPercentage = try value.integer(key)
            case "isUpgraded": payload.isUpgraded = try value.bool(key)
            case "offerType": payload.offerType = try value.integer(key)
            case "offerIdentifier": payload.offerIdentifier = try value.string(key)
            case "offerDiscountType": payload.offerDiscountType = try value.string(key)
            case "environment": payload.environment = try value.open(key)
            case "storefront": payload.storefront = try value.string(key)
            case "storefrontId": payload.storefrontId = try value.string(key)
            case "transactionReason": payload.transactionReason = try value.open(key)
            case "currency": payload.currency = try value.string(key)
            case "price": payload.price = try value.integer(key)
            case "appTransactionId": payload.appTransactionId = try value.string(key)
            default: continue  // fields this version does not model
            }
        }
        return payload
    }

    /// An empty payload, filled field by field by ``decodeFast(fields:)``.
    private init() {}
}
