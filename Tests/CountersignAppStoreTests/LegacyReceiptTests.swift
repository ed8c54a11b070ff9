import CountersignAppStore
import CountersignTesting
import Foundation
import Testing
import X509

/// Legacy PKCS#7 app receipts: nothing in one is believed before its signature chains to a
/// pinned root and its bundle id is the app's (`AppReceiptVerifier`). The reader underneath
/// (swift-asn1's BER parser) answers broken input with an error that says what is wrong.
@Suite("Legacy receipts")
struct LegacyReceiptTests {
    static let real = String(decoding: Fixtures.data("apple/legacy-receipts/sandbox-app-receipt-real.b64"), as: UTF8.self)
    static let realBundle = "com.XMCodey.apple.ClipTrace"
    /// The receipt's own creation date, 2025-04-30T02:30:31Z: its signing leaf expired 2026-08-23.
    static let created = Date(timeIntervalSince1970: 1_745_980_231)

    static func verifier(bundleId: String = realBundle, anchors: [Certificate] = [AppleRootCertificates.appleIncRoot]) -> AppReceiptVerifier {
        var verifier = AppReceiptVerifier(anchors: anchors, bundleId: bundleId)
        verifier.now = { Date() }
        return verifier
    }

    static func failure(_ body: () async throws -> Void) async -> AppReceiptVerifier.Failure? {
        do {
            try await body()
            return nil
        } catch {
            return error as? AppReceiptVerifier.Failure
        }
    }

    @Test("the real Sandbox receipt verifies against Apple's RSA root at its creation date, with or without line breaks")
    func real() async throws {
        let receipt = try await Self.verifier().verify(base64: Self.real)
        #expect(receipt == AppReceipt(bundleId: Self.realBundle, creationDate: Self.created, transactionIds: ["2000000909538865"]))
        let wrapped = Self.real.trimmingCharacters(in: .whitespacesAndNewlines).enumerated()
            .map { $0.offset > 0 && $0.offset % 76 == 0 ? "\n\($0.element)" : "\($0.element)" }.joined()
        #expect(try await Self.verifier().verify(base64: wrapped).transactionIds == ["2000000909538865"])
        // The anchors a verifier of App Store signed data (G3) implies for receipts.
        let anchors = AppReceiptVerifier.anchors(for: [AppleRootCertificates.anchor])
        #expect(try await Self.verifier(anchors: anchors).verify(base64: Self.real).bundleId == Self.realBundle)
    }

    @Test("the real receipt is refused for another app, under another root, and with any byte of its content changed")
    func realRefused() async throws {
        #expect(await Self.failure { _ = try await Self.verifier(bundleId: "com.example.demo").verify(base64: Self.real) }?.kind == .wrongApp)
        let g3Only = await Self.failure { _ = try await Self.verifier(anchors: [AppleRootCertificates.rootCAG3]).verify(base64: Self.real) }
        #expect(g3Only?.kind == .untrusted)
        // Change the transaction id inside the signed content: the signature no longer verifies.
        var bytes = [UInt8](Data(base64Encoded: Self.real.trimmingCharacters(in: .whitespacesAndNewlines))!)
        let id = Array("2000000909538865".utf8)
        let at = try #require((0...(bytes.count - id.count)).first { Array(bytes[$0..<($0 + id.count)]) == id })
        bytes[at + id.count - 1] = UInt8(ascii: "6")
        let forged = Data(bytes).base64EncodedString()
        #expect(try AppReceiptVerifier.unverifiedContents(base64: forged).transactionIds == ["2000000909538866"])
        let refused = await Self.failure { _ = try await Self.verifier().verify(base64: forged) }
        #expect(refused?.kind == .untrusted)
        #expect(refused?.description.contains("signature does not verify") == true)
    }

    @Test("an unsigned receipt naming any transaction id is refused: the forgery of the review's finding 1")
    func unsignedForgery() async throws {
        let forged = LegacyReceiptForgery.unsigned(transactionId: "2000000909538865", bundleId: Self.realBundle).base64EncodedString()
        #expect(try AppReceiptVerifier.unverifiedContents(base64: forged).transactionIds == ["2000000909538865"])
        let refused = await Self.failure { _ = try await Self.verifier().verify(base64: forged) }
        #expect(refused != nil)
        #expect(refused?.kind != .wrongApp)
    }

    @Test("a receipt signed by a test store CA verifies against that CA only, and not when its creation date is ahead")
    func testStoreSigned() async throws {
        let ca = try TestStoreCA.create(name: "receipts")
        let other = try TestStoreCA.create(name: "other")
        let receipt = try ca.mintAppReceipt(bundleId: "com.example.demo", transactionIds: ["1", "2"], creationDate: Date())
        let verified = try await Self.verifier(bundleId: "com.example.demo", anchors: [ca.root]).verify(base64: receipt)
        #expect(verified.transactionIds == ["1", "2"])
        let foreign = await Self.failure { _ = try await Self.verifier(bundleId: "com.example.demo", anchors: [other.root]).verify(base64: receipt) }
        #expect(foreign?.kind == .untrusted)
        let ahead = try ca.mintAppReceipt(bundleId: "com.example.demo", transactionIds: ["1"], creationDate: Date().addingTimeInterval(3_600))
        let future = await Self.failure { _ = try await Self.verifier(bundleId: "com.example.demo", anchors: [ca.root]).verify(base64: ahead) }
        #expect(future?.kind == .untrusted && future?.description.contains("future") == true)
    }

    @Test(
        "broken receipts are refused with what is wrong",
        arguments: [
            ("not base64 at all", "not base64"),
            (Data([0x30, 0x82, 0xFF, 0xFF, 0x01]).base64EncodedString(), "is not BER"),
            (Data([0x30, 0x80, 0x02, 0x01, 0x01]).base64EncodedString(), "is not BER"),
            (Data([0x30, 0x03, 0x02, 0x01, 0x01]).base64EncodedString(), "is not CMS SignedData"),
            (Data([0x30]).base64EncodedString(), "is not BER"),
            (Data("plain text".utf8).base64EncodedString(), "not a PKCS#7 app receipt"),
            (Data("{ \"purchase-info\" = \"e30=\"; }".utf8).base64EncodedString(), "iOS 6 and earlier are not accepted"),
        ])
    func broken(_ base64: String, _ expected: String) async {
        let failure = await Self.failure { _ = try await Self.verifier().verify(base64: base64) }
        #expect(failure?.kind == .malformed)
        #expect(failure?.description.contains(expected) == true, "\(failure?.description ?? "none")")
    }

    @Test("a truncated real receipt is refused, at every length")
    func truncated() async {
        let bytes = Data(base64Encoded: Self.real.trimmingCharacters(in: .whitespacesAndNewlines))!
        var refused = 0
        for length in stride(from: 1, to: bytes.count, by: 97) {
            #expect(await Self.failure { _ = try await Self.verifier().verify(base64: bytes.prefix(length).base64EncodedString()) } != nil)
            refused += 1
        }
        #expect(refused > 40)
    }

    @Test("deeply nested BER is refused, not recursed into without bound")
    func deepNesting() {
        let depth = 200
        let nested = Data(Array(repeating: [UInt8]([0x30, 0x80]), count: depth).flatMap { $0 } + Array(repeating: 0, count: depth * 2))
        #expect(throws: AppReceiptVerifier.Failure.self) {
            _ = try AppReceiptVerifier.unverifiedContents(base64: nested.base64EncodedString())
        }
    }

    @Test("an empty transaction id is refused")
    func emptyTransactionId() throws {
        #expect {
            _ = try AppReceiptVerifier.unverifiedContents(
                base64: LegacyReceiptForgery.unsigned(transactionId: "", bundleId: "b").base64EncodedString())
        } throws: { error in
            (error as? AppReceiptVerifier.Failure)?.description.contains("is empty") == true
        }
        #expect(
            try AppReceiptVerifier.unverifiedContents(base64: LegacyReceiptForgery.unsigned(transactionId: "7", bundleId: "b").base64EncodedString())
                .transactionIds == ["7"])
    }
}
