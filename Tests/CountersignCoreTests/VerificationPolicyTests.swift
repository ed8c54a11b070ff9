import CountersignCore
import CountersignServerCore
import CountersignTesting
import Foundation
import Testing

/// The verification policy's part of the signed message, from the attacker's side, and its rules.
@Suite("Verification policy")
struct VerificationPolicyTests {
    static let policy = "mode=enforced;rollout=2500;sdk=0.1.0;seed=9f86d081884c7d65;expires=1767315600000"

    static var asking: SignedRequestParts {
        var request = SampleExchange.make().request
        request.acceptsPolicy = true
        return request
    }

    static func verifier() -> SignatureVerifier {
        var configuration = SignatureVerifier.Configuration(rootKeys: [TestKeys.root.publicKey])
        configuration.now = { TestKeys.referenceDate }
        return SignatureVerifier(configuration: configuration)
    }

    static func outcome(_ exchange: SampleExchange) -> VerificationOutcome {
        verifier().verify(request: exchange.request, response: exchange.response)
    }

    @Test("an answer signed with the policy a client asked for verifies, `none` too")
    func honest() {
        #expect(Self.outcome(SampleExchange.make(request: Self.asking, policy: Self.policy)) == .verified)
        #expect(Self.outcome(SampleExchange.make(request: Self.asking, policy: "none")) == .verified)
    }

    @Test(
        "another well-formed policy in the header gives payloadMismatch",
        arguments: [
            "none", "mode=informational;rollout=2500;sdk=0.1.0;seed=9f86d081884c7d65;expires=1767315600000",
            "mode=enforced;rollout=0;sdk=0.1.0;seed=9f86d081884c7d65;expires=1767315600000",
            "mode=enforced;rollout=2500;sdk=9.0.0;seed=9f86d081884c7d65;expires=1767315600000",
            "mode=enforced;rollout=2500;sdk=0.1.0;seed=0000000000000000;expires=1767315600000",
            "mode=enforced;rollout=2500;sdk=0.1.0;seed=9f86d081884c7d65;expires=1",
        ])
    func changed(_ forged: String) {
        var exchange = SampleExchange.make(request: Self.asking, policy: Self.policy)
        exchange.response.policy = forged
        #expect(Self.outcome(exchange) == .failed(.payloadMismatch))
    }

    @Test("a stripped policy is missingPolicy, whether the header or the request's ask was taken away")
    func stripped() {
        var exchange = SampleExchange.make(request: Self.asking, policy: Self.policy)
        exchange.response.policy = nil
        #expect(Self.outcome(exchange) == .failed(.missingPolicy))
        // The ask removed on the way: the server signed no policy, the client still asked.
        var unasked = SampleExchange.make()
        unasked.request.acceptsPolicy = true
        #expect(Self.outcome(unasked) == .failed(.missingPolicy))
    }

    @Test("a policy added to an answer nobody asked a policy of is not part of it (and cannot make it verify)")
    func notAsked() {
        var exchange = SampleExchange.make(request: Self.asking, policy: Self.policy)
        exchange.request.acceptsPolicy = false
        #expect(Self.outcome(exchange) == .failed(.payloadMismatch))
        var plain = SampleExchange.make()
        plain.response.policy = Self.policy
        #expect(Self.outcome(plain) == .verified)
    }

    @Test(
        "any other spelling is malformedPolicy before the signature is looked at",
        arguments: [
            "None", "", " none", "mode=enforced;rollout=2500;sdk=0.1.0;seed=9f86d081884c7d65;expires=1767315600000;",
            "mode=Enforced;rollout=2500;sdk=0.1.0;seed=9f86d081884c7d65;expires=1767315600000",
            "mode=enforced;rollout=10001;sdk=0.1.0;seed=9f86d081884c7d65;expires=1767315600000",
            "mode=enforced;rollout=02500;sdk=0.1.0;seed=9f86d081884c7d65;expires=1767315600000",
            "mode=enforced;rollout=-1;sdk=0.1.0;seed=9f86d081884c7d65;expires=1767315600000",
            "mode=enforced;rollout=2500;sdk=0.1.x;seed=9f86d081884c7d65;expires=1767315600000",
            // Found by FuzzEntitlementToken: `0.100` read as 0.100.0 would be written back as another text.
            "mode=enforced;rollout=2500;sdk=0.100;seed=9f86d081884c7d65;expires=1767315600000",
            "mode=enforced;rollout=2500;sdk=0.1.0;seed=9F86D081884C7D65;expires=1767315600000",
            "mode=enforced;rollout=2500;sdk=0.1.0;seed=9f86d081884c7d65;expires=0",
            "mode=enforced;rollout=2500;sdk=0.1.0;seed=9f86d081884c7d65;expires=99999999999999999",
            "rollout=2500;mode=enforced;sdk=0.1.0;seed=9f86d081884c7d65;expires=1767315600000",
            "mode=disabled;rollout=2500;sdk=0.1.0;seed=9f86d081884c7d65;expires=1767315600000",
            "mode=enforced;rollout=2500;sdk=0.1.0;seed=9f86d081884c7d65;expires=1767315600000\u{301}",
            "none\u{0}",
        ])
    func malformed(_ value: String) {
        #expect(VerificationPolicy.Statement(header: value) == nil)
        var exchange = SampleExchange.make(request: Self.asking, policy: Self.policy)
        exchange.response.policy = value
        #expect(Self.outcome(exchange) == .failed(.malformedPolicy))
    }

    @Test("bytes cannot move between the policy and the body: the line feed ends the policy")
    func noTrading() {
        // An empty-bodied 304: the policy is the message's last part but for its line feed.
        let exchange = SampleExchange.make(request: Self.asking, statusCode: 304, policy: Self.policy, body: Data())
        #expect(Self.outcome(exchange) == .verified)
        var shifted = exchange
        shifted.response.policy = String(Self.policy.dropLast())
        shifted.response.body = Data("0".utf8)
        #expect(Self.outcome(shifted) != .verified)
    }

    @Test("a policy is read back from its header value as it was written")
    func roundTrip() throws {
        let statement = try #require(VerificationPolicy.Statement(header: Self.policy))
        #expect(statement.headerValue == Self.policy)
        guard case .policy(let policy) = statement else { throw PolicyTestError.notAPolicy }
        #expect(policy.mode == .enforced && policy.rolloutBasisPoints == 2500 && policy.minimumSDKVersion == SDKVersion("0.1.0"))
        #expect(policy.expirationDate == Date(timeIntervalSince1970: 1_767_315_600))
    }

    @Test("the rollout covers its share of 10,000 users within 1 percentage point, and raising it only adds users")
    func rolloutShare() {
        let seed = VerificationPolicy.seed(forApp: "demo")
        let buckets = (0..<10_000).map { VerificationPolicy.bucket(seed: seed, appUserID: "$CSAnonymousID:user-\($0)") }
        for share in [100, 1_000, 2_500, 5_000, 9_000] {
            let covered = buckets.filter { $0 < share }.count
            #expect(abs(covered - share) <= 100, "share \(share) basis points covered \(covered) of 10,000")
        }
        let policy = VerificationPolicy(
            mode: .enforced, rolloutBasisPoints: 1_000, minimumSDKVersion: SDKVersion(major: 0, minor: 0, patch: 0), seed: seed,
            expiresMilliseconds: 1_767_315_600_000)
        var wider = policy
        wider.rolloutBasisPoints = 2_500
        let date = Date(timeIntervalSince1970: 1_767_229_200)
        let version = SDKVersion(major: 0, minor: 1, patch: 0)
        for index in 0..<10_000 where policy.applies(to: "user-\(index)", sdkVersion: version, at: date) {
            #expect(wider.applies(to: "user-\(index)", sdkVersion: version, at: date))
        }
        // Another app's seed draws other users.
        let other = (0..<10_000).map {
            VerificationPolicy.bucket(seed: VerificationPolicy.seed(forApp: "other"), appUserID: "$CSAnonymousID:user-\($0)")
        }
        #expect(zip(buckets, other).filter { $0 < 2_500 && $1 < 2_500 }.count < 900)
    }

    @Test("the policy applies below its expiry only, and only from its SDK version on")
    func appliesWhen() {
        let policy = VerificationPolicy(
            mode: .enforced, rolloutBasisPoints: 10_000, minimumSDKVersion: SDKVersion(major: 1, minor: 2, patch: 0), seed: "0000000000000000",
            expiresMilliseconds: 1_767_315_600_000)
        let before = Date(timeIntervalSince1970: 1_767_315_599)
        #expect(policy.applies(to: "u", sdkVersion: SDKVersion(major: 1, minor: 2, patch: 0), at: before))
        #expect(policy.applies(to: "u", sdkVersion: SDKVersion(major: 1, minor: 10, patch: 0), at: before))
        #expect(!policy.applies(to: "u", sdkVersion: SDKVersion(major: 1, minor: 1, patch: 99), at: before))
        #expect(!policy.applies(to: "u", sdkVersion: SDKVersion(major: 1, minor: 2, patch: 0), at: policy.expirationDate))
        #expect(SDKVersion("1.10") == SDKVersion(major: 1, minor: 10, patch: 0) && SDKVersion("1.2.3.4") == nil && SDKVersion("1.-2") == nil)
    }

    enum PolicyTestError: Error { case notAPolicy }
}

/// `countersign verify` of a captured exchange that asked for the policy: the capture's own
/// headers decide, as the SDK's do.
@Suite("Verification policy in captured traffic")
struct CapturedPolicyTests {
    static func capture(asking: Bool, policyHeader: String?) throws -> CapturedExchange {
        let signed = SampleExchange.make(request: VerificationPolicyTests.asking, policy: VerificationPolicyTests.policy)
        var request = "GET /v1/subscribers/u1 HTTP/1.1\r\nAuthorization: Bearer cs_pub_demo_0123456789\r\n"
        request += "X-Nonce: \(signed.request.nonce!.base64EncodedString())\r\n"
        request += "X-Post-Params-Hash: \(signed.request.postParamsHash!)\r\nX-Headers-Hash: \(signed.request.headersHash!)\r\n"
        if asking { request += "X-Accept-Verification-Policy: 1\r\n" }
        var response = "HTTP/1.1 200 OK\r\nX-Signature: \(signed.response.signature!)\r\nX-Request-Time: \(signed.response.requestTime!)\r\n"
        response += "X-ETag: \(signed.response.etag!)\r\nContent-Length: \(signed.response.body.count)\r\n"
        if let policyHeader { response += "X-Verification-Policy: \(policyHeader)\r\n" }
        return try CapturedExchange(
            request: Data((request + "\r\n").utf8), response: Data((response + "\r\n").utf8) + signed.response.body)
    }

    static func outcome(asking: Bool, policyHeader: String?) throws -> VerificationOutcome {
        let exchange = try capture(asking: asking, policyHeader: policyHeader)
        return VerificationPolicyTests.verifier().verify(request: exchange.request, response: exchange.response)
    }

    @Test("the capture verifies with its policy; stripped, changed or not asked for, it does not")
    func captured() throws {
        #expect(try Self.outcome(asking: true, policyHeader: VerificationPolicyTests.policy) == .verified)
        #expect(try Self.outcome(asking: true, policyHeader: nil) == .failed(.missingPolicy))
        #expect(try Self.outcome(asking: true, policyHeader: "none") == .failed(.payloadMismatch))
        #expect(try Self.outcome(asking: false, policyHeader: VerificationPolicyTests.policy) == .failed(.payloadMismatch))
    }
}
