import CountersignCore
import CountersignTesting
import Foundation
import Testing

/// The signed message has no length prefixes: `… ‖ requestTime ‖ etag ‖ body`. An attacker can
/// move digits across a boundary and keep the signed bytes, and so the signature, intact.
///
/// RevenueCat's SDKs accept any request time that parses as an integer and any ETag string, so
/// the shifted answer below verifies under their rules: the client then believes the answer was
/// made at a time ten times later (or earlier) than it was, which defeats cache staleness and
/// replay-age checks that rely on the request time. Our verifier parses the answer's parts
/// strictly (fixed 16-character ETag, JSON-object body), so no boundary can move.
@Suite("Digit shifting between request time, ETag and body")
struct DigitShiftTests {
    /// An ETag made of digits only: valid hex, so the server could really send it.
    static let numericETag = "1234567890123456"
    static let honest = SampleExchange.make(requestTime: "1767229200000", etag: numericETag)

    static func verifier(etagFormat: ETagFormat) -> SignatureVerifier {
        var configuration = SignatureVerifier.Configuration(rootKeys: [TestKeys.root.publicKey])
        configuration.now = { TestKeys.referenceDate }
        configuration.etagFormat = etagFormat
        return SignatureVerifier(configuration: configuration)
    }

    static func signedBytes(_ exchange: SampleExchange) -> [UInt8] {
        let blob = try! SignatureBlob(base64: exchange.response.signature!)
        return SignedMessage.bytes(
            salt: blob.salt,
            request: exchange.request,
            response: SignedResponseParts(requestTime: exchange.response.requestTime!, etag: exchange.response.etag, body: exchange.response.body)
        )
    }

    @Test("a digit moved from the request time into a numeric ETag is caught by the ETag shape")
    func requestTimeIntoETag() {
        var shifted = Self.honest
        shifted.response.requestTime = "176722920000"  // one digit shorter: 1975 instead of 2026
        shifted.response.etag = "0" + Self.numericETag  // the digit now leads the ETag
        #expect(Self.signedBytes(shifted) == Self.signedBytes(Self.honest), "the attack keeps the signed bytes")

        // RevenueCat's rules (any ETag shape) accept it:
        #expect(Self.verifier(etagFormat: .unchecked).verify(request: shifted.request, response: shifted.response) == .verified)
        // Ours do not:
        #expect(Self.verifier(etagFormat: .fixedHex16).verify(request: shifted.request, response: shifted.response) == .failed(.malformedETag))
    }

    @Test("a digit moved from a numeric ETag into the request time is caught by the ETag shape")
    func etagIntoRequestTime() {
        var shifted = Self.honest
        shifted.response.requestTime = "17672292000001"  // ten times later: year 2530
        shifted.response.etag = String(Self.numericETag.dropFirst())
        #expect(Self.signedBytes(shifted) == Self.signedBytes(Self.honest))
        // RevenueCat's rules accept it; even with any ETag shape, ours see a time past the
        // intermediate's expiry (which no genuine answer carries):
        #expect(Self.verifier(etagFormat: .unchecked).verify(request: shifted.request, response: shifted.response) == .failed(.intermediateExpired))
        #expect(Self.verifier(etagFormat: .fixedHex16).verify(request: shifted.request, response: shifted.response) == .failed(.malformedETag))
    }

    @Test("without an ETag, a digit moved into a JSON body is caught by the body check")
    func requestTimeIntoBody() {
        let numericBody = SampleExchange.make(etag: nil, body: Data("7".utf8))
        var shifted = numericBody
        shifted.response.requestTime = "17672292000007"
        shifted.response.body = Data()
        #expect(Self.signedBytes(shifted) == Self.signedBytes(numericBody))
        let verifier = Self.verifier(etagFormat: .fixedHex16)
        // Unchecked, the body would pass; the request time (year 2530) is past the key's life.
        #expect(verifier.verify(request: shifted.request, response: shifted.response, bodyFormat: .unchecked) == .failed(.intermediateExpired))
        #expect(verifier.verify(request: shifted.request, response: shifted.response, bodyFormat: .jsonObject) == .failed(.malformedBody))

        // And an object body cannot give or take digits at all: it starts with `{`.
        let objectBody = SampleExchange.make(etag: nil)
        var moved = objectBody
        moved.response.requestTime = "176722920000"
        moved.response.body = Data("0".utf8) + objectBody.response.body
        #expect(Self.signedBytes(moved) == Self.signedBytes(objectBody))
        #expect(verifier.verify(request: moved.request, response: moved.response) == .failed(.malformedBody))
    }

    @Test("a request time with a leading zero (a digit borrowed from before it) is refused")
    func leadingZero() {
        var shifted = Self.honest
        shifted.response.requestTime = "0" + Self.honest.response.requestTime!
        #expect(Self.verifier(etagFormat: .fixedHex16).verify(request: shifted.request, response: shifted.response) == .failed(.malformedRequestTime))
    }
}
