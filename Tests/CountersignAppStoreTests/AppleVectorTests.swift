import CountersignCore
import CountersignServerCore
import CountersignTesting
import Foundation
import Testing
import X509

@testable import CountersignAppStore

/// Every entry of `Tests/Fixtures/apple/manifest.json` gives its stated result.
@Suite("Apple signed-data vectors")
struct AppleVectorTests {
    static func kind(_ entry: [String: Any]) -> String { entry["kind"] as? String ?? "" }

    func verifyAny(_ verifier: SignedDataVerifier, _ jws: String, kind: String) async throws -> Any {
        if kind.hasPrefix("ResponseBodyV2") { return AppleVectors.encodedFields(try await verifier.verify(jws, as: NotificationPayload.self)) }
        if kind == "JWSRenewalInfo" { return AppleVectors.encodedFields(try await verifier.verify(jws, as: RenewalInfoPayload.self)) }
        return AppleVectors.encodedFields(try await verifier.verify(jws, as: TransactionPayload.self))
    }

    @Test("real Apple Sandbox JWS verify against Apple Root CA - G3 at their signedDate, with the stated fields")
    func realAppleSigned() async throws {
        let entries = AppleVectors.entries("real_apple_signed")
        var ran = 0
        for entry in entries {
            let file = entry["file"] as! String
            let expected = entry["expected_fields"] as? [String: Any] ?? [:]
            let bundleId = (expected["bundleId"] ?? expected["data.bundleId"]) as? String
            let verifier = AppleVectors.verifier(root: AppleVectors.appleRoot, bundleId: bundleId)
            let decoded = try await verifyAny(verifier, AppleVectors.text(file), kind: Self.kind(entry))
            for (path, value) in expected {
                #expect(AppleVectors.matches(AppleVectors.value(decoded, at: path), value), "\(file): \(path)")
            }
            ran += 1
        }
        print("Apple real signed vectors verified: \(ran)")
        #expect(ran == entries.count && ran >= 40)
    }

    @Test("nested transaction and renewal info of a real notification verify on their own")
    func nestedVerification() async throws {
        let verifier = AppleVectors.verifier(root: AppleVectors.appleRoot, bundleId: "com.loki-project.loki-messenger")
        let result = try await verifier.verifyNotification(AppleVectors.text("real-apple-signed/session-pro-backend/n14-REFUND.notification.jws"))
        #expect(result.notification.notificationType == .refund)
        #expect(result.transaction?.productId == "com.getsession.org.pro_sub")
        #expect(result.transaction?.revocationDate != nil)
        #expect(result.renewalInfo?.originalTransactionId == result.transaction?.originalTransactionId)
    }

    @Test("the negative real vectors fail with their stated class")
    func realAppleNegative() async throws {
        let expectations: [String: SignedDataError.Status] = [
            "tampered-environment.jws": .verificationFailure,
            "tampered-expiresDate.jws": .verificationFailure,
            "reserialized-payload.jws": .verificationFailure,
            "der-encoded-signature.jws": .verificationFailure,
            "x5c-root-removed.jws": .invalidChainLength,
        ]
        let entries = AppleVectors.entries("real_apple_signed_negative")
        for entry in entries {
            let file = entry["file"] as! String
            let expected = try #require(expectations[String(file.split(separator: "/").last!)], "no expectation for \(file)")
            let verifier = AppleVectors.verifier(root: AppleVectors.appleRoot, bundleId: nil)
            await #expect(throws: SignedDataError.status(expected)) {
                _ = try await verifier.verify(AppleVectors.text(file), as: TransactionPayload.self)
            }
        }
        print("Apple negative vectors rejected: \(entries.count)")
        #expect(entries.count == expectations.count)
    }

    @Test("Apple library mocks: valid against its test root with com.example; the stated failures")
    func appleLibraryMocks() async throws {
        let root = AppleVectors.appleLibraryTestRoot
        let entries = AppleVectors.entries("apple_lib_mock")
        for entry in entries {
            let jws = (entry["file"] as? String).map(AppleVectors.text) ?? entry["inline"] as! String
            let config = entry["config"] as? [String: Any] ?? [:]
            let verifier = AppleVectors.verifier(root: root, bundleId: config["bundleId"] as? String ?? "com.example", appAppleId: 1234)
            let file = entry["file"] as? String ?? jws
            switch entry["expect"] as! String {
            case "valid":
                if file.contains("renewalInfo") {
                    let payload = try await verifier.verify(jws, as: RenewalInfoPayload.self)
                    #expect(payload.environment == .sandbox)
                } else if file.contains("Notification") {
                    let payload = try await verifier.verify(jws, as: NotificationPayload.self)
                    #expect(payload.notificationType == .test)
                    #expect(payload.notificationUUID == "9ad56bd2-0bc6-42e0-af24-fd996d87a1e6")
                } else {
                    let payload = try await verifier.verify(jws, as: TransactionPayload.self)
                    #expect(payload.bundleId == "com.example")
                }
            case let failure:
                // The manifest names INVALID_JWT_FORMAT as Apple's Swift library does; its Python
                // library (the one our differential suite runs) says VERIFICATION_FAILURE.
                let status = try #require(failure == "INVALID_JWT_FORMAT" ? .verificationFailure : SignedDataError.Status(rawValue: failure))
                await #expect(throws: SignedDataError.status(status), "\(file)") {
                    _ = try await verifier.verify(jws, as: NotificationPayload.self)
                }
            }
        }
        print("Apple library mock vectors checked: \(entries.count)")
        #expect(entries.count == 7)
    }

    @Test("the 'also' cases of the mocks: Production, a wrong bundle, a notification as a transaction, Apple's real root")
    func appleLibraryMockVariants() async throws {
        let root = AppleVectors.appleLibraryTestRoot
        let notification = AppleVectors.text("apple-lib-mock/testNotification.jws")
        let productionOnly = AppleVectors.verifier(root: root, bundleId: "com.example", appAppleId: 1234, environments: [.production])
        await #expect(throws: SignedDataError.status(.invalidEnvironment)) {
            _ = try await productionOnly.verify(notification, as: NotificationPayload.self)
        }

        let asTransaction = AppleVectors.verifier(root: root, bundleId: "com.example", appAppleId: 1235)
        await #expect(throws: SignedDataError.status(.invalidAppIdentifier)) {
            _ = try await asTransaction.verify(notification, as: TransactionPayload.self)
        }

        let againstApple = AppleVectors.verifier(root: AppleVectors.appleRoot, bundleId: "com.example")
        await #expect(throws: SignedDataError.status(.verificationFailure)) {
            _ = try await againstApple.verify(notification, as: NotificationPayload.self)
        }

        let wrongBundle = AppleVectors.verifier(root: root, bundleId: "com.example.x")
        await #expect(throws: SignedDataError.status(.invalidAppIdentifier)) {
            _ = try await wrongBundle.verify(AppleVectors.text("apple-lib-mock/transactionInfo.jws"), as: TransactionPayload.self)
        }
    }

    @Test("Apple library certificate chains give the stated result at the stated time")
    func appleLibraryChains() async throws {
        let section = AppleVectors.manifest["apple_lib_certs"] as! [String: Any]
        let effective = Date(timeIntervalSince1970: section["EFFECTIVE_DATE_seconds"] as! Double)
        let expired = Date(timeIntervalSince1970: section["EXPIRED_DATE_seconds"] as! Double)
        var ran = 0
        for case let entry in section["cases"] as! [[String: Any]] where entry["leaf"] != nil {
            let certificate = { (name: String) in AppleVectors.certificate("apple-lib-certs/\(name)") }
            let root = certificate(entry["trust_root_override"] as? String ?? "test-root.der")
            let time = entry["at"] as! String == "EXPIRED_DATE" ? expired : effective
            let x5c = [entry["leaf"] as! String, entry["intermediate"] as! String].map {
                Fixtures.data("apple/apple-lib-certs/\($0)").base64EncodedString()
            }
            let verifier = AppleVectors.verifier(root: root, bundleId: nil, now: time)
            let outcome: Result<VerifiedChain, SignedDataError>
            do throws(SignedDataError) { outcome = .success(try await verifier.validateChain(x5c.map(JSONValue.string), at: time)) } catch {
                outcome = .failure(error)
            }
            let expectValid = (entry["expect"] as! String).hasPrefix("valid")
            switch outcome {
            case .success: #expect(expectValid, "\(entry)")
            case .failure(let error):
                #expect(!expectValid, "\(entry): \(error)")
                #expect(error.status == .verificationFailure)
            }
            ran += 1
        }
        print("Apple library chain vectors: \(ran)")
        #expect(ran == 6)
    }

    @Test("Xcode JWS verify only when Xcode is allowed, with their fractional dates")
    func xcode() async throws {
        let entries = AppleVectors.entries("xcode").filter { ($0["file"] as! String).hasSuffix(".jws") }
        for entry in entries {
            let file = entry["file"] as! String
            let jws = AppleVectors.text(file)
            let bundleId = (entry["config"] as? [String: Any])?["bundleId"] as? String
            var configuration = SignedDataVerifier.Configuration(anchors: [], bundleId: bundleId, environments: [.xcode])
            configuration.allowsXcode = true
            configuration.xcodeCertificates = [AppleVectors.certificate("xcode/storekit-testing-in-xcode-2023.cer")]
            let xcodeVerifier = try SignedDataVerifier(configuration: configuration)
            let strict = AppleVectors.verifier(root: AppleVectors.appleRoot, bundleId: bundleId)

            let decoded: Any
            if file.contains("app-transaction") {
                decoded = AppleVectors.encodedFields(try await xcodeVerifier.verify(jws, as: AppTransactionPayload.self))
                await #expect(throws: SignedDataError.status(.invalidChainLength)) {
                    _ = try await strict.verify(jws, as: AppTransactionPayload.self)
                }
            } else if file.contains("renewal") {
                decoded = AppleVectors.encodedFields(try await xcodeVerifier.verify(jws, as: RenewalInfoPayload.self))
                await #expect(throws: SignedDataError.status(.invalidChainLength)) { _ = try await strict.verify(jws, as: RenewalInfoPayload.self) }
            } else {
                decoded = AppleVectors.encodedFields(try await xcodeVerifier.verify(jws, as: TransactionPayload.self))
                await #expect(throws: SignedDataError.status(.invalidChainLength)) { _ = try await strict.verify(jws, as: TransactionPayload.self) }
            }
            for (path, value) in entry["expected_fields"] as? [String: Any] ?? [:] {
                #expect(AppleVectors.matches(AppleVectors.value(decoded, at: path), value), "\(file): \(path)")
            }
        }
        print("Xcode vectors: \(entries.count)")
        #expect(entries.count == 3)
    }

    @Test("Xcode data is refused by a configuration that accepts Production")
    func xcodeNeverWithProduction() {
        var configuration = SignedDataVerifier.Configuration(anchors: [], bundleId: nil, environments: [.production, .xcode])
        configuration.allowsXcode = true
        configuration.xcodeCertificates = [AppleVectors.certificate("xcode/storekit-testing-in-xcode-2023.cer")]
        #expect(throws: SignedDataVerifier.ConfigurationError.self) { _ = try SignedDataVerifier(configuration: configuration) }
    }

    @Test("PKCS#7 receipts give the stated transaction ids; the iOS 6 transaction receipt is refused")
    func legacyReceipts() throws {
        let entries = (AppleVectors.entries("legacy_receipts") + AppleVectors.entries("xcode"))
            .filter { ($0["file"] as! String).hasSuffix(".b64") }
        for entry in entries {
            let file = entry["file"] as! String
            let expected = entry["expect_transaction_id"] as? String
            if file.contains("legacyTransaction") {
                #expect(throws: AppReceiptVerifier.Failure.self) { _ = try AppReceiptVerifier.unverifiedContents(base64: AppleVectors.text(file)) }
                continue
            }
            let ids = try AppReceiptVerifier.unverifiedContents(base64: AppleVectors.text(file)).transactionIds
            #expect(ids.first == expected, "\(file)")
        }
        print("legacy receipt vectors: \(entries.count)")
        #expect(entries.count == 4)
    }
}
