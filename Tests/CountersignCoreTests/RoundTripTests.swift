import CountersignCore
import CountersignTesting
import Foundation
import Testing

/// Randomized: whatever the server signs, the client verifies; flip any single bit of the
/// signature or the body and it does not.
@Suite("Sign and verify round trips")
struct RoundTripTests {
    static let iterations = 400

    static func randomString(_ generator: inout SeededGenerator, alphabet: String, length: ClosedRange<Int>) -> String {
        let characters = Array(alphabet)
        return String((0..<Int.random(in: length, using: &generator)).map { _ in characters.randomElement(using: &generator)! })
    }

    static func randomBytes(_ generator: inout SeededGenerator, count: Int) -> Data {
        Data((0..<count).map { _ in UInt8.random(in: .min ... .max, using: &generator) })
    }

    /// A random exchange: every optional part present or absent, random values of the right shape.
    static func randomExchange(_ generator: inout SeededGenerator) -> (SignedRequestParts, SignedResponseParts, statusCode: Int) {
        let pathCharacters = "abcdefghijklmnopqrstuvwxyz0123456789-_.~%$:"
        let request = SignedRequestParts(
            authValue: Bool.random(using: &generator)
                ? randomString(&generator, alphabet: "abcdefghijklmnopqrstuvwxyzABCDEF_0123456789", length: 8...40) : "",
            nonce: Bool.random(using: &generator) ? randomBytes(&generator, count: 12) : nil,
            path: "/v1/subscribers/" + randomString(&generator, alphabet: pathCharacters, length: 1...60),
            postParamsHash: Bool.random(using: &generator)
                ? FieldsHash.headerValue([("app_user_id", randomString(&generator, alphabet: "abc123é漢", length: 0...20)), ("fetch_token", nil)])
                : nil,
            headersHash: Bool.random(using: &generator)
                ? FieldsHash.headerValue([("X-Is-Sandbox", Bool.random(using: &generator) ? "true" : "false")]) : nil
        )
        let notModified = Int.random(in: 0..<5, using: &generator) == 0
        let etag: String? = notModified || Bool.random(using: &generator) ? randomBytes(&generator, count: 8).hexString : nil
        let body: Data
        if notModified {
            body = Data()
        } else {
            let value = randomString(&generator, alphabet: "abcdefghij 0123456789é漢🙂", length: 0...900)
            body = try! JSONSerialization.data(withJSONObject: ["subscriber": ["note": value, "n": Int.random(in: 0...1_000_000, using: &generator)]])
        }
        // Any time of 13 digits up to the signing intermediate's expiry (later ones are refused: no
        // genuine answer is signed after its key expired).
        let expiry = UInt64(TestKeys.intermediate.certificate.expirationDate.timeIntervalSince1970 * 1000) - 1
        let time = String(UInt64.random(in: 1_000_000_000_000...expiry, using: &generator))
        return (request, SignedResponseParts(requestTime: time, etag: etag, body: body), notModified ? 304 : 200)
    }

    static let verifier = SignatureVerifier(rootKeys: [TestKeys.root.publicKey], now: { TestKeys.referenceDate })

    @Test("random exchanges always verify; any single flipped bit of the signature or body fails")
    func randomizedRoundTrip() throws {
        var generator = SeededGenerator(seed: 0xC0FFEE)
        let signer = ResponseSigner(key: TestKeys.intermediate)
        var bodyFlips = 0
        for _ in 0..<Self.iterations {
            let (request, parts, status) = Self.randomExchange(&generator)
            let signature = try signer.signature(request: request, response: parts)
            let response = ReceivedResponse(
                statusCode: status, signature: signature, requestTime: parts.requestTime, etag: parts.etag, body: parts.body)
            #expect(Self.verifier.verify(request: request, response: response) == .verified)

            var raw = [UInt8](Data(base64Encoded: signature)!)
            let bit = Int.random(in: 0..<(raw.count * 8), using: &generator)
            raw[bit / 8] ^= 1 << (bit % 8)
            var flippedSignature = response
            flippedSignature.signature = Data(raw).base64EncodedString()
            #expect(!Self.verifier.verify(request: request, response: flippedSignature).isVerified, "bit \(bit) of the signature")

            if !parts.body.isEmpty {
                var body = [UInt8](parts.body)
                let bodyBit = Int.random(in: 0..<(body.count * 8), using: &generator)
                body[bodyBit / 8] ^= 1 << (bodyBit % 8)
                var flippedBody = response
                flippedBody.body = Data(body)
                #expect(!Self.verifier.verify(request: request, response: flippedBody).isVerified, "bit \(bodyBit) of the body")
                bodyFlips += 1
            }
        }
        #expect(bodyFlips > Self.iterations / 2)
    }

    @Test("every single bit of one signature matters", arguments: [0, 1])
    func exhaustiveSignatureBits(statusVariant: Int) throws {
        let exchange = statusVariant == 0 ? SampleExchange.make() : SampleExchange.make(statusCode: 304, body: Data())
        let raw = [UInt8](Data(base64Encoded: exchange.response.signature!)!)
        for bit in 0..<(raw.count * 8) {
            var flipped = raw
            flipped[bit / 8] ^= 1 << (bit % 8)
            var response = exchange.response
            response.signature = Data(flipped).base64EncodedString()
            #expect(!Self.verifier.verify(request: exchange.request, response: response).isVerified, "bit \(bit)")
        }
    }

    @Test("two signatures of the same answer differ (fresh salt) and both verify")
    func saltIsFresh() throws {
        let signer = ResponseSigner(key: TestKeys.intermediate)
        let exchange = SampleExchange.make()
        let parts = SignedResponseParts(requestTime: exchange.response.requestTime!, etag: exchange.response.etag, body: exchange.response.body)
        let first = try signer.blob(request: exchange.request, response: parts)
        let second = try signer.blob(request: exchange.request, response: parts)
        #expect(first.salt != second.salt)
        for blob in [first, second] {
            var response = exchange.response
            response.signature = blob.base64
            #expect(Self.verifier.verify(request: exchange.request, response: response) == .verified)
        }
    }
}
