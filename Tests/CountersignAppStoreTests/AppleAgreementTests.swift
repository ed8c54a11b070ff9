import CountersignServerCore
import Foundation
import Testing

@testable import CountersignAppStore

/// Each rule by which our verifier answers as Apple's library answers (the differential suite in
/// scripts/appstore-differential runs both side by side); here each is tampered with alone.
@Suite("Agreement with Apple's library")
struct AppleAgreementTests {
    let ca: ThrowawayCA
    let now = Date()

    init() throws {
        ca = try ThrowawayCA()
    }

    var signedDate: Int64 { Int64(now.timeIntervalSince1970 * 1000) - 60_000 }

    func transactionJSON(_ extra: String = "") -> String {
        #"{"transactionId":"1","originalTransactionId":"1","bundleId":"com.example.demo","productId":"pro_monthly","environment":"Sandbox","signedDate":\#(signedDate)\#(extra)}"#
    }

    func outcome(_ jws: String, as kind: SignedDataVerifier.Kind = .transaction) async throws -> SignedDataError? {
        let verifier = try ca.verifier(now: now)
        do throws(SignedDataError) {
            _ = try await verifier.verifyPayload(jws, kind: kind)
            return nil
        } catch {
            return error
        }
    }

    @Test(
        "header: crit may name only b64 (present, not false); kid is a string",
        arguments: [
            (["crit": ["b64"], "b64": true], nil),
            (["crit": ["exp"], "exp": 1], SignedDataError.Reason.unsupportedHeader),
            (["crit": ["b64"]], .unsupportedHeader),
            (["crit": [String]()], .unsupportedHeader),
            (["b64": false, "crit": ["b64"]], .unsupportedHeader),
            (["kid": 7], .unsupportedHeader),
            (["kid": "k1", "typ": "JWT"], nil),
        ] as [([String: any Sendable], SignedDataError.Reason?)])
    func header(_ header: [String: any Sendable], refusal: SignedDataError.Reason?) async throws {
        let error = try await outcome(ca.token(header: header, payloadJSON: transactionJSON()))
        #expect(error?.reason == refusal, "\(header): \(String(describing: error))")
        if refusal != nil { #expect(error?.status == .verificationFailure) }
    }

    @Test("x5c: missing or empty is VERIFICATION_FAILURE, a wrong count INVALID_CHAIN_LENGTH, x5c[2] is never read")
    func chainShape() async throws {
        let leaf = ThrowawayCA.base64DER(ca.leaf)
        let intermediate = ThrowawayCA.base64DER(ca.intermediate)
        #expect(try await outcome(ca.token(header: ["x5c": [String]()], payloadJSON: transactionJSON()))?.reason == .missingChain)
        #expect(try await outcome(ca.token(header: ["x5c": [leaf, intermediate]], payloadJSON: transactionJSON()))?.status == .invalidChainLength)
        #expect(try await outcome(ca.token(header: ["x5c": [leaf, "AAAA", leaf]], payloadJSON: transactionJSON()))?.status == .invalidCertificate)
        #expect(try await outcome(ca.token(header: ["x5c": [leaf, intermediate, "not a certificate"]], payloadJSON: transactionJSON())) == nil)
    }

    @Test(
        "JWT claims are checked as a JWT library checks them",
        arguments: [
            (#","exp":1"#, SignedDataError.Reason.jwtClaims),
            (#","exp":99999999999"#, nil),
            (#","nbf":99999999999"#, .jwtClaims),
            (#","iat":99999999999"#, .jwtClaims),
            (#","iat":1"#, nil),
            (#","iat":"now""#, .jwtClaims),
            (#","aud":"someone""#, .jwtClaims),
            (#","aud":"""#, nil),
            (#","sub":5"#, .jwtClaims),
            (#","jti":5"#, .jwtClaims),
        ] as [(String, SignedDataError.Reason?)])
    func claims(_ extra: String, refusal: SignedDataError.Reason?) async throws {
        let error = try await outcome(ca.token(header: [:], payloadJSON: transactionJSON(extra)))
        #expect(error?.reason == refusal, "\(extra): \(String(describing: error))")
    }

    @Test("one spelling per token: padding and unused bits set are refused, each with its reason")
    func spellings() async throws {
        let header = try JSONSerialization.data(withJSONObject: ["alg": "ES256", "x5c": ca.chain.map(ThrowawayCA.base64DER)], options: [.sortedKeys])
        var headerSegment = header.base64URLEncodedString
        var payloadSegment = Data(transactionJSON().utf8).base64URLEncodedString
        #expect(try await outcome(ca.token(headerSegment: headerSegment, payloadSegment: payloadSegment)) == nil)
        let padding = String(repeating: "=", count: (4 - payloadSegment.count % 4) % 4)
        if !padding.isEmpty {
            let padded = try await outcome(ca.token(headerSegment: headerSegment, payloadSegment: payloadSegment + padding))
            #expect(padded?.reason == .paddedBase64URL)
        }
        // The last character with its unused low bits set decodes to the same bytes elsewhere.
        if payloadSegment.count % 4 != 0 {
            let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
            let last = alphabet.firstIndex(of: payloadSegment.removeLast())!
            payloadSegment.append(alphabet[last | 1])
            if alphabet[last | 1] != alphabet[last] {
                let odd = try await outcome(ca.token(headerSegment: headerSegment, payloadSegment: payloadSegment))
                #expect(odd?.reason == .malformedJWS)
            }
        }
        headerSegment = Data(#"{"alg":"RS256","alg":"ES256","x5c":[]}"#.utf8).base64URLEncodedString
        #expect(try await outcome(ca.token(headerSegment: headerSegment, payloadSegment: payloadSegment))?.reason == .duplicateKey)
    }

    @Test("a notification's subject is its first section, taken whole: appData counts, summary never fills in for data")
    func notificationSections() async throws {
        let uuid = #""notificationUUID":"u","notificationType":"RESCIND_CONSENT","signedDate":\#(signedDate)"#
        let appData = #"{\#(uuid),"appData":{"bundleId":"com.example.demo","environment":"Sandbox","signedAppData":"e30"}}"#
        #expect(try await outcome(ca.token(header: [:], payloadJSON: appData), as: .notification) == nil)
        let otherApp = #"{\#(uuid),"appData":{"bundleId":"com.other","environment":"Sandbox"}}"#
        #expect(try await outcome(ca.token(header: [:], payloadJSON: otherApp), as: .notification)?.status == .invalidAppIdentifier)
        let borrowed = #"{\#(uuid),"data":{"bundleId":"com.example.demo"},"summary":{"bundleId":"com.example.demo","environment":"Sandbox"}}"#
        #expect(try await outcome(ca.token(header: [:], payloadJSON: borrowed), as: .notification)?.status == .invalidEnvironment)
    }

    @Test("an app transaction's chain is checked at signedDate; receiptCreationDate only when there is none")
    func appTransactionDate() async throws {
        let old = Int64(now.addingTimeInterval(-400 * 86_400).timeIntervalSince1970 * 1000)
        let current = #"{"receiptType":"Sandbox","bundleId":"com.example.demo","receiptCreationDate":\#(old),"signedDate":\#(signedDate)}"#
        #expect(try await outcome(ca.token(header: [:], payloadJSON: current), as: .appTransaction) == nil)
        let undated = #"{"receiptType":"Sandbox","bundleId":"com.example.demo","receiptCreationDate":\#(old)}"#
        #expect(try await outcome(ca.token(header: [:], payloadJSON: undated), as: .appTransaction)?.reason == .untrustedChain)
    }

    @Test("Production needs the app's Apple ID; it is checked on notifications and app transactions, never on transactions")
    func production() async throws {
        var configuration = SignedDataVerifier.Configuration(
            anchors: [TrustAnchor(certificate: ca.root, environments: [.production])], bundleId: "com.example.demo", environments: [.production]
        )
        #expect(throws: SignedDataVerifier.ConfigurationError.self) { _ = try SignedDataVerifier(configuration: configuration) }
        configuration.appAppleId = 1234
        let verifier = try SignedDataVerifier(configuration: configuration)
        let transaction = transactionJSON(#","appAppleId":42"#).replacingOccurrences(of: "Sandbox", with: "Production")
        _ = try await verifier.verifyPayload(ca.token(header: [:], payloadJSON: transaction), kind: .transaction)
        let app = #"{"receiptType":"Production","bundleId":"com.example.demo","appAppleId":42,"signedDate":\#(signedDate)}"#
        await #expect(throws: SignedDataError.status(.invalidAppIdentifier)) {
            _ = try await verifier.verifyPayload(ca.token(header: [:], payloadJSON: app), kind: .appTransaction)
        }
        // A Sandbox notification under a Production-only verifier: the app id is judged first, as Apple does.
        let sandbox =
            #"{"notificationUUID":"u","notificationType":"TEST","data":{"bundleId":"com.example.demo","appAppleId":42,"environment":"Sandbox"}}"#
        await #expect(throws: SignedDataError.status(.invalidAppIdentifier)) {
            _ = try await verifier.verifyPayload(ca.token(header: [:], payloadJSON: sandbox), kind: .notification)
        }
    }

    @Test("strict mode: Apple's own test certificates lack key identifiers and are refused, as Apple's SignedDataVerifier refuses them")
    func strictKeyIdentifiers() async throws {
        var configuration = SignedDataVerifier.Configuration(
            anchors: [TrustAnchor(certificate: AppleVectors.appleLibraryTestRoot, environments: [.sandbox])], bundleId: "com.example",
            environments: [.sandbox]
        )
        configuration.now = { Date(timeIntervalSince1970: 1_681_314_324) }
        let jws = AppleVectors.text("apple-lib-mock/transactionInfo.jws")
        await #expect(throws: SignedDataError.status(.verificationFailure)) {
            _ = try await SignedDataVerifier(configuration: configuration).verify(jws, as: TransactionPayload.self)
        }
        configuration.requiresKeyIdentifiers = false
        _ = try await SignedDataVerifier(configuration: configuration).verify(jws, as: TransactionPayload.self)
    }
}
