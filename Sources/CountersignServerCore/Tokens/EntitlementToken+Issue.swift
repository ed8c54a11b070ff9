import CountersignCore
import Crypto
import Foundation

/// Issuing entitlement tokens: the server's half (the verifier is in `CountersignCore`).
extension EntitlementToken {
    /// The token's expiry for claims issued at `issuedAt` (seconds): `lifetime` seconds later, but
    /// never past the earliest entitlement expiry it vouches for nor past the intermediate's.
    public static func expiry(issuedAt: Int64, lifetime: Int, entitlements: [Claims.Entitlement], intermediate: IntermediateCertificate) -> Int64 {
        var expiry = issuedAt + Int64(lifetime)
        for case let ends? in entitlements.map(\.expiresMilliseconds) { expiry = min(expiry, ends / 1000) }
        return min(expiry, Int64(intermediate.expirationDays) * 86_400)
    }

    /// The compact JWS of `claims`, signed by `key`.
    public static func sign(_ claims: Claims, with key: IntermediateSigningKey) throws -> String {
        let input = Data(header(key.certificate)).base64URLEncodedString + "." + Data(payload(claims)).base64URLEncodedString
        let signature = try key.privateKey.signature(for: Data(input.utf8))
        return input + "." + signature.base64URLEncodedString
    }

    static func header(_ certificate: IntermediateCertificate) -> [UInt8] {
        var json = LeanJSONWriter(capacity: 256)
        json.raw(#"{"alg":"EdDSA","typ":"JWT","intermediate":"#)
        json.string(certificate.publicKey.base64URLEncodedString)
        json.raw(#","intermediate_expires":"#)
        json.integer(Int64(certificate.expirationDays))
        json.raw(#","root_signature":"#)
        json.string(certificate.rootSignature.base64URLEncodedString)
        json.raw("}")
        return json.bytes
    }

    static func payload(_ claims: Claims) -> [UInt8] {
        var json = LeanJSONWriter(capacity: 256 + 96 * claims.entitlements.count)
        json.raw(#"{"iss":"#)
        json.string(claims.issuer)
        json.raw(#","sub":"#)
        json.string(claims.subject)
        json.raw(#","aud":"#)
        json.string(claims.audience)
        json.raw(#","app":"#)
        json.string(claims.app)
        json.raw(#","entitlements":["#)
        for (index, entitlement) in claims.entitlements.enumerated() {
            if index > 0 { json.raw(",") }
            json.raw(#"{"id":"#)
            json.string(entitlement.identifier)
            json.raw(#","product_id":"#)
            json.string(entitlement.productIdentifier)
            json.raw(#","expires_ms":"#)
            if let expires = entitlement.expiresMilliseconds { json.integer(expires) } else { json.raw("null") }
            json.raw("}")
        }
        json.raw(#"],"iat":"#)
        json.integer(claims.issuedAt)
        json.raw(#","exp":"#)
        json.integer(claims.expiresAt)
        json.raw(#","jti":"#)
        json.string(claims.id)
        json.raw("}")
        return json.bytes
    }
}

extension EntitlementToken {
    /// The entitlements of `subscriber` active at `date` (an expiry or grace period end after it,
    /// or none), sorted by id: what a token issued then vouches for.
    public static func activeEntitlements(of subscriber: SubscriberResponse.Subscriber, at date: Date) -> [Claims.Entitlement] {
        subscriber.entitlements.compactMap { id, entitlement -> Claims.Entitlement? in
            guard let expires = entitlement.expiresDate else {
                return Claims.Entitlement(identifier: id, productIdentifier: entitlement.productIdentifier, expiresMilliseconds: nil)
            }
            let ends = [expires, entitlement.gracePeriodExpiresDate].compactMap { $0.flatMap(WireDate.parse) }.max()
            guard let ends, ends > date else { return nil }
            return Claims.Entitlement(identifier: id, productIdentifier: entitlement.productIdentifier, expiresMilliseconds: ends.epochMilliseconds)
        }.sorted { $0.identifier < $1.identifier }
    }
}
