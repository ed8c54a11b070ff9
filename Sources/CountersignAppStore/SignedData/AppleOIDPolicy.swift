import SwiftASN1
import X509

/// Apple's marker extensions: the WWDR intermediate carries `1.2.840.113635.100.6.2.1` and the
/// App Store signing leaf `1.2.840.113635.100.6.11.1`. A chain without them is not App Store
/// signed data, whatever root it reaches. Our test store CA carries the same markers.
struct AppleOIDPolicy: VerifierPolicy {
    static let intermediateMarker: ASN1ObjectIdentifier = [1, 2, 840, 113_635, 100, 6, 2, 1]
    static let leafMarker: ASN1ObjectIdentifier = [1, 2, 840, 113_635, 100, 6, 11, 1]

    let verifyingCriticalExtensions: [ASN1ObjectIdentifier] = []

    func chainMeetsPolicyRequirements(chain: UnverifiedCertificateChain) async -> PolicyEvaluationResult {
        guard chain.count == 3 else {
            return .failsToMeetPolicy(reason: "chain has \(chain.count) certificates, expected leaf, intermediate and root")
        }
        guard chain[0].extensions[oid: Self.leafMarker] != nil else {
            return .failsToMeetPolicy(reason: "leaf lacks the App Store receipt-signing OID 1.2.840.113635.100.6.11.1")
        }
        guard chain[1].extensions[oid: Self.intermediateMarker] != nil else {
            return .failsToMeetPolicy(reason: "intermediate lacks the Apple WWDR OID 1.2.840.113635.100.6.2.1")
        }
        return .meetsPolicy
    }
}
