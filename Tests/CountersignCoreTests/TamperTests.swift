import CountersignCore
import CountersignTesting
import Crypto
import Foundation
import Testing

/// From the attacker's side: change exactly one signed part of an honest answer and the verifier
/// must say `failed` with the reason that part maps to.
@Suite("Tampering with one part")
struct TamperTests {
    static let honest = SampleExchange.make()

    static func verifier(now: Date = TestKeys.referenceDate, tolerance: TimeInterval = 0) -> SignatureVerifier {
        var configuration = SignatureVerifier.Configuration(rootKeys: [TestKeys.root.publicKey])
        configuration.now = { now }
        configuration.clockSkewTolerance = tolerance
        return SignatureVerifier(configuration: configuration)
    }

    static func outcome(_ exchange: SampleExchange, verifier: SignatureVerifier = verifier()) -> VerificationOutcome {
        verifier.verify(request: exchange.request, response: exchange.response)
    }

    /// Rewrites the `X-Signature` of the honest answer through its raw 180 bytes.
    static func withBlob(_ change: (inout [UInt8]) -> Void) -> SampleExchange {
        var exchange = honest
        var raw = [UInt8](Data(base64Encoded: exchange.response.signature!)!)
        change(&raw)
        exchange.response.signature = Data(raw).base64EncodedString()
        return exchange
    }

    @Test("the honest answer verifies")
    func honestVerifies() {
        #expect(Self.outcome(Self.honest) == .verified)
    }

    // MARK: Message parts: the client's own request values

    struct PartChange: CustomTestStringConvertible, Sendable {
        let name: String
        let change: @Sendable (inout SampleExchange) -> Void
        var testDescription: String { name }
    }

    static let messagePartChanges: [PartChange] = [
        PartChange(name: "auth value (another API key)") { $0.request.authValue = "cs_pub_other_0123456789" },
        PartChange(name: "auth value removed") { $0.request.authValue = "" },
        PartChange(name: "nonce (another request's)") { $0.request.nonce = Data("0123456789ac".utf8) },
        PartChange(name: "nonce removed") { $0.request.nonce = nil },
        PartChange(name: "path (another user)") { $0.request.path = "/v1/subscribers/u2" },
        PartChange(name: "path escaping") { $0.request.path = "/v1/subscribers/u%31" },
        PartChange(name: "post params hash") {
            $0.request.postParamsHash = FieldsHash.headerValue([("app_user_id", "u2"), ("fetch_token", "jws")])
        },
        PartChange(name: "post params hash removed") { $0.request.postParamsHash = nil },
        PartChange(name: "headers hash") { $0.request.headersHash = FieldsHash.headerValue([("X-Is-Sandbox", "false")]) },
        PartChange(name: "headers hash removed") { $0.request.headersHash = nil },
        // The answer's own parts, each changed into another well-formed value so that only the
        // signature can catch it.
        PartChange(name: "request time") { $0.response.requestTime = "1767229200001" },
        PartChange(name: "ETag") { $0.response.etag = "0123456789abcdee" },
        PartChange(name: "ETag removed") { $0.response.etag = nil },
        PartChange(name: "body: entitlement product") {
            $0.response.body = Data(String(decoding: SampleExchange.body, as: UTF8.self).replacingOccurrences(of: "lifetime", with: "lifetimf").utf8)
        },
        PartChange(name: "body: trailing newline removed") { $0.response.body = SampleExchange.body.dropLast() },
        PartChange(name: "body: replaced by another JSON object") { $0.response.body = Data(#"{"subscriber":{}}"#.utf8) },
    ]

    @Test("changing one message part gives payloadMismatch", arguments: messagePartChanges)
    func messagePart(_ part: PartChange) {
        var exchange = Self.honest
        part.change(&exchange)
        #expect(Self.outcome(exchange) == .failed(.payloadMismatch))
    }

    // MARK: Blob parts

    @Test("intermediate public key changed gives untrustedRoot")
    func blobIntermediateKey() {
        #expect(Self.outcome(Self.withBlob { $0[5] ^= 0x01 }) == .failed(.untrustedRoot))
    }

    @Test("intermediate expiration changed (extended) gives untrustedRoot")
    func blobExpiration() {
        #expect(Self.outcome(Self.withBlob { $0[34] &+= 1 }) == .failed(.untrustedRoot))
    }

    @Test("root signature changed gives untrustedRoot")
    func blobRootSignature() {
        #expect(Self.outcome(Self.withBlob { $0[60] ^= 0x80 }) == .failed(.untrustedRoot))
    }

    @Test("salt changed gives payloadMismatch")
    func blobSalt() {
        #expect(Self.outcome(Self.withBlob { $0[100] ^= 0x01 }) == .failed(.payloadMismatch))
    }

    @Test("payload signature changed gives payloadMismatch")
    func blobPayloadSignature() {
        #expect(Self.outcome(Self.withBlob { $0[120] ^= 0x01 }) == .failed(.payloadMismatch))
    }

    @Test("an intermediate issued by an unpinned root gives untrustedRoot")
    func foreignRoot() {
        let attacker = TestKeys.makeIntermediate(root: TestKeys.foreignRoot, seed: Data(200...231), expirationDays: TestKeys.referenceDay + 30)
        #expect(Self.outcome(SampleExchange.make(key: attacker)) == .failed(.untrustedRoot))
    }

    @Test("a second pinned root is accepted (root rotation)")
    func secondPinnedRoot() {
        let newKey = TestKeys.makeIntermediate(root: TestKeys.foreignRoot, seed: Data(200...231), expirationDays: TestKeys.referenceDay + 30)
        var configuration = SignatureVerifier.Configuration(rootKeys: [TestKeys.root.publicKey, TestKeys.foreignRoot.publicKey])
        configuration.now = { TestKeys.referenceDate }
        let verifier = SignatureVerifier(configuration: configuration)
        #expect(Self.outcome(SampleExchange.make(key: newKey), verifier: verifier) == .verified)
        #expect(Self.outcome(Self.honest, verifier: verifier) == .verified)
    }

    // MARK: The signature header itself

    @Test("signature header stripped gives missingSignature")
    func stripped() {
        var exchange = Self.honest
        exchange.response.signature = nil
        #expect(Self.outcome(exchange) == .failed(.missingSignature))
    }

    @Test(
        "signature header not 240 base64 characters gives malformedSignature",
        arguments: [
            "", "AAAA", String(repeating: "A", count: 239), String(repeating: "A", count: 244),
            String(repeating: "*", count: 240), String(repeating: "A", count: 238) + "==",
        ])
    func malformedSignature(_ value: String) {
        var exchange = Self.honest
        exchange.response.signature = value
        #expect(Self.outcome(exchange) == .failed(.malformedSignature))
    }

    @Test("signature truncated by one character gives malformedSignature")
    func truncatedSignature() {
        var exchange = Self.honest
        exchange.response.signature = String(exchange.response.signature!.dropLast())
        #expect(Self.outcome(exchange) == .failed(.malformedSignature))
    }

    // MARK: Strictly shaped parts of the answer

    @Test("request time missing gives missingRequestTime")
    func missingRequestTime() {
        var exchange = Self.honest
        exchange.response.requestTime = nil
        #expect(Self.outcome(exchange) == .failed(.missingRequestTime))
    }

    @Test(
        "request time not 1-16 plain digits gives malformedRequestTime",
        arguments: ["", "01767229200000", "+1767229200000", "-1", "1767229200000.0", "1767229200000 ", "12345678901234567", "1e12", "１２３"])
    func malformedRequestTime(_ value: String) {
        var exchange = Self.honest
        exchange.response.requestTime = value
        #expect(Self.outcome(exchange) == .failed(.malformedRequestTime))
    }

    @Test(
        "ETag not 16 lowercase hex gives malformedETag",
        arguments: ["0123456789ABCDEF", "0123456789abcde", "0123456789abcdef0", "\"0123456789abcdef\"", "W/0123456789abcd", "test-etag"])
    func malformedETag(_ value: String) {
        var exchange = Self.honest
        exchange.response.etag = value
        #expect(Self.outcome(exchange) == .failed(.malformedETag))
    }

    @Test(
        "body that is not a JSON object gives malformedBody",
        arguments: ["", "null", "[]", "\"\"", "12", "{", "{\"a\":1}{", "{\"a\":01}", "{'a':1}", "{\"a\":1,}"])
    func malformedBody(_ value: String) {
        var exchange = Self.honest
        exchange.response.body = Data(value.utf8)
        #expect(Self.outcome(exchange) == .failed(.malformedBody))
    }

    @Test("a 304 vouches for its ETag: honest verifies, forged ETag fails, missing ETag or a body fails")
    func notModified() {
        let honest304 = SampleExchange.make(statusCode: 304, body: Data())
        #expect(Self.outcome(honest304) == .verified)

        var forged = honest304
        forged.response.etag = "fedcba9876543210"
        #expect(Self.outcome(forged) == .failed(.payloadMismatch))

        var missing = honest304
        missing.response.etag = nil
        #expect(Self.outcome(missing) == .failed(.missingETag))

        var withBody = honest304
        withBody.response.body = SampleExchange.body
        #expect(Self.outcome(withBody) == .failed(.malformedBody))
    }

    @Test("a client nonce that is not 12 bytes is refused")
    func malformedNonce() {
        var exchange = Self.honest
        exchange.request.nonce = Data("0123456789abc".utf8)
        #expect(Self.outcome(exchange) == .failed(.malformedNonce))
    }

    // MARK: Time

    @Test("device clock past the intermediate's expiry, answer signed before it: deviceClockOutsideValidity (cannot verify)")
    func deviceClockAhead() {
        let afterExpiry = TestKeys.intermediate.certificate.expirationDate.addingTimeInterval(1)
        let outcome = Self.outcome(Self.honest, verifier: Self.verifier(now: afterExpiry))
        #expect(outcome == .failed(.deviceClockOutsideValidity))
        #expect(VerificationFailure.deviceClockOutsideValidity.category == .cannotVerify)
    }

    @Test("clock skew tolerance covers a device clock slightly ahead")
    func toleranceCoversSkew() {
        let afterExpiry = TestKeys.intermediate.certificate.expirationDate.addingTimeInterval(60)
        #expect(Self.outcome(Self.honest, verifier: Self.verifier(now: afterExpiry, tolerance: 120)) == .verified)
        #expect(Self.outcome(Self.honest, verifier: Self.verifier(now: afterExpiry, tolerance: 30)) == .failed(.deviceClockOutsideValidity))
    }

    @Test("an answer signed after its intermediate expired: intermediateExpired (tampering)")
    func signedWithExpiredIntermediate() {
        let expired = TestKeys.makeIntermediate(root: TestKeys.root, seed: Data(33...64), expirationDays: TestKeys.referenceDay)
        let outcome = Self.outcome(SampleExchange.make(key: expired))
        #expect(outcome == .failed(.intermediateExpired))
        #expect(VerificationFailure.intermediateExpired.category == .tampering)
    }

    @Test("the verifier caches a checked intermediate but still checks every message")
    func cacheDoesNotWeakenChecks() {
        let verifier = Self.verifier()
        #expect(Self.outcome(Self.honest, verifier: verifier) == .verified)
        var tampered = Self.honest
        tampered.response.body = Data(#"{"subscriber":{}}"#.utf8)
        #expect(Self.outcome(tampered, verifier: verifier) == .failed(.payloadMismatch))
        #expect(Self.outcome(Self.withBlob { $0[60] ^= 0x80 }, verifier: verifier) == .failed(.untrustedRoot))
    }
}
