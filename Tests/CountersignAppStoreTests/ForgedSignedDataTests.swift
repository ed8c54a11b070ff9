import CountersignTesting
import Crypto
import Foundation
import Testing
import X509

@testable import CountersignAppStore

/// From the attacker's side: signed data built with a throwaway CA, each with one defect, is
/// rejected with the right class. The well-formed control proves the defect is what fails.
@Suite("Forged signed data")
struct ForgedSignedDataTests {
    let ca: ThrowawayCA
    let payload = ThrowawayCA.sandboxTransaction()

    init() throws {
        ca = try ThrowawayCA()
    }

    func rejects(_ jws: String, with status: SignedDataError.Status, verifier: SignedDataVerifier? = nil) async throws {
        let verifier = try verifier ?? ca.verifier()
        await #expect(throws: SignedDataError.status(status)) { _ = try await verifier.verify(jws, as: TransactionPayload.self) }
    }

    @Test("control: a well-formed token from the pinned throwaway root verifies")
    func control() async throws {
        let decoded = try await ca.verifier().verify(ca.token(payload: payload), as: TransactionPayload.self)
        #expect(decoded == payload.roundedToMilliseconds())
    }

    @Test("x5c[2] is a self-made 'Apple Root CA - G3' look-alike: never trusted")
    func lookAlikeRoot() async throws {
        let forger = try ThrowawayCA(rootName: "Apple Root CA - G3")
        var configuration = SignedDataVerifier.Configuration(
            anchors: [TrustAnchor(certificate: AppleVectors.appleRoot, environments: [.sandbox])],
            bundleId: "com.example.demo", environments: [.sandbox]
        )
        configuration.now = { Date() }
        try await rejects(forger.token(payload: payload), with: .verificationFailure, verifier: SignedDataVerifier(configuration: configuration))
    }

    @Test("chains of 2 and 4 certificates are refused as INVALID_CHAIN_LENGTH", arguments: [2, 4])
    func chainLength(_ count: Int) async throws {
        let x5c = count == 2 ? [ca.leaf, ca.intermediate] : [ca.leaf, ca.intermediate, ca.root, ca.root]
        try await rejects(ca.token(payload: payload, x5c: x5c), with: .invalidChainLength)
    }

    @Test("alg other than ES256 is refused", arguments: ["none", "HS256", "ES384", "es256", ""])
    func algorithm(_ alg: String) async throws {
        try await rejects(ca.token(payload: payload, alg: alg), with: .verificationFailure)
    }

    @Test("a DER-encoded ECDSA signature is refused (JWS needs raw R‖S)")
    func derSignature() async throws {
        try await rejects(ca.token(payload: payload) { $0.derRepresentation }, with: .verificationFailure)
    }

    @Test("a leaf without Apple's receipt-signing OID is refused")
    func leafWithoutOID() async throws {
        let forger = try ThrowawayCA(leafHasOID: false)
        try await rejects(forger.token(payload: payload), with: .verificationFailure, verifier: forger.verifier())
    }

    @Test("a signedDate an hour in the future is refused; four minutes is tolerated")
    func futureSignedDate() async throws {
        let now = Date()
        let later = ThrowawayCA.sandboxTransaction(signedDate: now.addingTimeInterval(3_600))
        try await rejects(ca.token(payload: later), with: .verificationFailure, verifier: ca.verifier(now: now))
        let slightlyLater = ThrowawayCA.sandboxTransaction(signedDate: now.addingTimeInterval(240))
        _ = try await ca.verifier(now: now).verify(ca.token(payload: slightlyLater), as: TransactionPayload.self)
    }

    @Test("a signedDate outside the chain's validity is refused, even after the chain was cached")
    func signedDateOutsideValidity() async throws {
        let verifier = try ca.verifier()
        _ = try await verifier.verify(ca.token(payload: payload), as: TransactionPayload.self)
        let ancient = ThrowawayCA.sandboxTransaction(signedDate: Date(timeIntervalSince1970: 1_000_000_000))
        try await rejects(ca.token(payload: ancient), with: .verificationFailure, verifier: verifier)
    }

    @Test("a changed payload byte fails the signature, also with the chain cached")
    func tamperedPayload() async throws {
        let verifier = try ca.verifier()
        let jws = try ca.token(payload: payload)
        _ = try await verifier.verify(jws, as: TransactionPayload.self)
        var changed = payload
        changed.productId = "lifetime"
        let parts = jws.split(separator: ".")
        let forged = parts[0] + "." + (try AppStoreJSON.makeEncoder().encode(changed)).base64URLEncodedString + "." + parts[2]
        try await rejects(String(forged), with: .verificationFailure, verifier: verifier)
    }

    @Test("bundle id, environment and Production app id are checked after the signature")
    func claims() async throws {
        var otherBundle = payload
        otherBundle.bundleId = "com.attacker.app"
        try await rejects(ca.token(payload: otherBundle), with: .invalidAppIdentifier)

        var production = payload
        production.environment = .production
        try await rejects(ca.token(payload: production), with: .invalidEnvironment)

        var testStore = payload
        testStore.environment = .testStore
        try await rejects(ca.token(payload: testStore), with: .invalidEnvironment)
    }
}

extension TransactionPayload {
    /// The payload as it survives a JSON round trip (dates in whole milliseconds).
    func roundedToMilliseconds() -> TransactionPayload {
        let data = try! AppStoreJSON.makeEncoder().encode(self)
        return try! AppStoreJSON.makeDecoder().decode(TransactionPayload.self, from: data)
    }
}
