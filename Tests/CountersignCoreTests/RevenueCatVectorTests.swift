import CountersignCore
import CountersignServerCore
import CountersignTesting
import Crypto
import Foundation
import Testing

/// Known-answer tests against signatures from RevenueCat's public SDK test suites: the proof
/// that our wire format is byte-compatible with theirs.
@Suite("RevenueCat vectors")
struct RevenueCatVectorTests {
    static let fullMessageVectors = RevenueCatVector.all { $0.isCurrentFullMessage }

    /// The request and answer of a vector as our types see them.
    static func exchange(_ vector: RevenueCatVector) -> (SignedRequestParts, ReceivedResponse) {
        let request = SignedRequestParts(
            authValue: vector.auth_value ?? "",
            nonce: vector.nonce_b64.map { Data(base64Encoded: $0)! },
            path: vector.path!,
            postParamsHash: vector.post_params_hash_header,
            headersHash: vector.headers_hash_header
        )
        let response = ReceivedResponse(
            statusCode: vector.status_code!,
            signature: vector.signature_b64,
            requestTime: vector.request_date,
            etag: vector.etag,
            body: Data((vector.body ?? "").utf8)
        )
        return (request, response)
    }

    static func verifier(for vector: RevenueCatVector) throws -> SignatureVerifier {
        var configuration = SignatureVerifier.Configuration(
            rootKeys: [try Curve25519.Signing.PublicKey(base64: vector.root_public_key_b64!)]
        )
        if let time = vector.verification_time_unix {
            let clock = Date(timeIntervalSince1970: TimeInterval(time))
            configuration.now = { clock }
        }
        // RevenueCat's Android tests use the ETag "test-etag" and a health body of `""`.
        configuration.etagFormat = .unchecked
        return SignatureVerifier(configuration: configuration)
    }

    @Test("the vector file has full-message vectors to run")
    func vectorsArePresent() throws {
        let valid = Self.fullMessageVectors.filter { $0.expected == "valid" }.count
        let invalid = Self.fullMessageVectors.count - valid
        print("RevenueCat full-message vectors: \(Self.fullMessageVectors.count) (\(valid) valid, \(invalid) invalid)")
        #expect(Self.fullMessageVectors.count >= 15)
        #expect(valid >= 12)
    }

    @Test("every full-message vector gives its expected outcome", arguments: fullMessageVectors)
    func fullMessage(_ vector: RevenueCatVector) throws {
        let (request, response) = Self.exchange(vector)
        let outcome = try Self.verifier(for: vector).verify(request: request, response: response, bodyFormat: .json)
        switch (vector.expected, vector.computed_result) {
        case ("valid", _): #expect(outcome == .verified)
        case (_, "invalid:payload_signature"): #expect(outcome == .failed(.payloadMismatch))
        case (_, "invalid:size"): #expect(outcome == .failed(.malformedSignature))
        default: Issue.record("vector \(vector.id) has an unknown expectation \(vector.computed_result ?? "nil")")
        }
    }

    @Test("our message builder produces each vector's signed bytes", arguments: fullMessageVectors.filter { $0.signed_message_hex != nil })
    func signedMessageBytes(_ vector: RevenueCatVector) throws {
        let (request, response) = Self.exchange(vector)
        let salt = Data(hex: try #require(vector.decoded?.salt_hex))
        let message = SignedMessage.bytes(
            salt: salt,
            request: request,
            response: SignedResponseParts(requestTime: response.requestTime!, etag: response.etag, body: response.body)
        )
        #expect(message.hexString == vector.signed_message_hex)
    }

    /// Ed25519 is deterministic in swift-crypto's BoringSSL backend; CryptoKit on Apple platforms
    /// randomizes signatures, so byte-for-byte reproduction is checked where BoringSSL is used.
    static let deterministicSigning: Bool = {
        #if canImport(CryptoKit)
        false
        #else
        true
        #endif
    }()

    @Test(
        "our signer reproduces RevenueCat's Android signatures byte for byte",
        .enabled(if: deterministicSigning, "CryptoKit's Ed25519 signatures are randomized"),
        arguments: fullMessageVectors.filter { $0.reproducible_with_test_private_keys == true })
    func androidSignerReproduction(_ vector: RevenueCatVector) throws {
        let keys = try #require(vector.test_keys)
        let root = try RootSigningKey(seed: TestKeys.unpaddedBase64(keys.root_private_seed_b64))
        #expect(root.publicKey.rawRepresentation.base64EncodedString() == vector.root_public_key_b64)
        let expiration = try #require(vector.decoded?.intermediate_key_expiration_days_le)
        let intermediate = try root.issueIntermediate(
            Curve25519.Signing.PrivateKey(rawRepresentation: TestKeys.unpaddedBase64(keys.intermediate_private_seed_b64)),
            expirationDays: expiration
        )
        let (request, response) = Self.exchange(vector)
        let signer = ResponseSigner(key: intermediate, saltSource: .fixed(Data(hex: try #require(vector.decoded?.salt_hex))))
        let signature = try signer.signature(
            request: request,
            response: SignedResponseParts(requestTime: response.requestTime!, etag: response.etag, body: response.body)
        )
        #expect(signature == vector.signature_b64)
    }

    @Test("intermediate-only vectors: issued by the root and expiry", arguments: RevenueCatVector.all { $0.kind == "intermediate_key_only" })
    func intermediateOnly(_ vector: RevenueCatVector) throws {
        let blob = try SignatureBlob(base64: try #require(vector.signature_b64))
        let verifier = SignatureVerifier(rootKeys: [try Curve25519.Signing.PublicKey(base64: vector.root_public_key_b64!)])
        let outcome = verifier.verifyIntermediate(of: blob)
        #expect(outcome == (vector.expected == "valid" ? .verified : .failed(.intermediateExpired)))
    }

    @Test("raw Ed25519 vectors agree with swift-crypto", arguments: RevenueCatVector.all { $0.kind == "raw_ed25519" })
    func rawEd25519(_ vector: RevenueCatVector) throws {
        let key = try Curve25519.Signing.PublicKey(base64: try #require(vector.public_key_b64))
        let valid = key.isValidSignature(Data(hex: try #require(vector.signature_hex)), for: Data(try #require(vector.message_utf8).utf8))
        #expect(valid == (vector.expected == "valid"))
    }

    @Test("the parse-only vector splits into its five parts; a short one is rejected")
    func parseOnly() throws {
        let vectors = RevenueCatVector.all { $0.kind == "parse_only" }
        for vector in vectors {
            let blob = try SignatureBlob(base64: try #require(vector.signature_b64))
            #expect(blob.intermediate.publicKey.hexString == "9d5a0a2632e1853368d7d3248ebe4312680c7f7eb51d6c7133272d0b5d0e6fb7")
            #expect(blob.intermediate.expirationDays == 0xFFFF_FFFF)
            #expect(blob.salt.hexString == "57d04a41de5a5e0d278203bac1f589e8")
            #expect(blob.rawRepresentation.base64EncodedString() == vector.signature_b64)
            #expect(throws: SignatureBlobError.wrongLength(15)) { try SignatureBlob(base64: "nVoKJjLhhTNo19M") }
        }
    }
}
