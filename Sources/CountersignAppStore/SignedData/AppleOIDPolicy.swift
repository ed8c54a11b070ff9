import SwiftASN1
import X509

/// Apple's marker extensions: the WWDR intermediate carries `1.2.840.113635.100.6.2.1` and the
/// App Store signing leaf `1.2.840.113635.100.6.11.1`. A chain without them is not App Store
/// signed data, whatever root it reaches. Our test store CA carries the same markers.
///
/// It also asks what OpenSSL's strict mode (`X509_V_FLAG_X509_STRICT`, which Apple's library
/// sets) asks of the certificates below the root: an authority key identifier on each, and a
/// subject key identifier and key usage on the intermediate. Apple's real chains carry them.
struct AppleOIDPolicy: VerifierPolicy {
    static let intermediateMarker: ASN1ObjectIdentifier = [1, 2, 840, 113_635, 100, 6, 2, 1]
    static let leafMarker: ASN1ObjectIdentifier = [1, 2, 840, 113_635, 100, 6, 11, 1]

    let verifyingCriticalExtensions: [ASN1ObjectIdentifier] = []
    /// Whether to ask for the key identifiers and key usage of OpenSSL's strict mode.
    let requiresKeyIdentifiers: Bool

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
        guard requiresKeyIdentifiers else { return .meetsPolicy }
        for (index, name) in [(0, "leaf"), (1, "intermediate")] where chain[index].extensions[oid: .X509ExtensionID.authorityKeyIdentifier] == nil {
            return .failsToMeetPolicy(reason: "\(name) has no authority key identifier (required in strict mode)")
        }
        guard chain[1].extensions[oid: .X509ExtensionID.subjectKeyIdentifier] != nil,
            let usage = try? chain[1].extensions.keyUsage, usage.keyCertSign
        else {
            return .failsToMeetPolicy(reason: "intermediate lacks a subject key identifier or a key usage with keyCertSign (required in strict mode)")
        }
        return .meetsPolicy
    }
}
