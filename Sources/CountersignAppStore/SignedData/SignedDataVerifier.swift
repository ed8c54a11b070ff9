import Crypto
import Foundation
@_spi(FixedExpiryValidationTime) import X509
import CountersignCore

/// A root certificate the verifier trusts, and the environments data under it may claim.
///
/// Apple's root may vouch for Production and Sandbox; a deployment's test store root only for
/// TestStore. So a test store key can never mint a "Production" purchase.
public struct TrustAnchor: Sendable {
    public var certificate: Certificate
    public var environments: Set<AppStoreEnvironment>

    public init(certificate: Certificate, environments: Set<AppStoreEnvironment>) {
        self.certificate = certificate
        self.environments = environments
    }

    /// Loads a DER or PEM certificate file.
    public static func loadCertificate(from url: URL) throws -> Certificate {
        let data = try Data(contentsOf: url)
        if let text = String(data: data, encoding: .utf8), text.contains("-----BEGIN") {
            return try Certificate(pemEncoded: text)
        }
        return try Certificate(derEncoded: [UInt8](data))
    }
}

/// Verifies App Store signed data (StoreKit 2 transactions, renewal infos, app transactions,
/// server notifications) and decodes its payload.
///
/// Checks, in order: three base64url segments; `alg` is ES256; `x5c` holds exactly three
/// certificates; `x5c[0]` chains through `x5c[1]` to a pinned root (`x5c[2]` is never used);
/// the intermediate and leaf carry Apple's OIDs; the chain is valid at the payload's signed
/// date, which may not be more than five minutes ahead of the clock; the raw R‖S ES256
/// signature verifies with the leaf key; then bundle id, environment and (Production) app id.
/// A chain that has passed once is cached by its header, so a repeat costs one signature check.
public final class SignedDataVerifier: Sendable {
    public struct Configuration: Sendable {
        /// Pinned roots with the environments each may vouch for.
        public var anchors: [TrustAnchor]
        /// The app's bundle id; nil skips the check (tools only).
        public var bundleId: String?
        /// The app's App Store id, checked for Production data.
        public var appAppleId: Int64?
        /// The environments the app accepts.
        public var environments: Set<AppStoreEnvironment>
        /// Accept StoreKit Testing in Xcode data (self-signed, one certificate). Development only;
        /// refused together with Production, and only with ``xcodeCertificates`` pinned.
        public var allowsXcode = false
        /// The StoreKit Testing certificates Xcode data must be signed by (the one Xcode exports
        /// for the app's StoreKit configuration). Required with ``allowsXcode``: any self-signed
        /// chain would otherwise do, and anyone can make one.
        public var xcodeCertificates: [Certificate] = []
        /// How far a signed date may be ahead of the clock.
        public var futureTolerance: TimeInterval = 300
        /// The clock.
        public var now: @Sendable () -> Date = { Date() }

        public init(anchors: [TrustAnchor], bundleId: String?, appAppleId: Int64? = nil, environments: Set<AppStoreEnvironment>) {
            self.anchors = anchors
            self.bundleId = bundleId
            self.appAppleId = appAppleId
            self.environments = environments
        }
    }

    public struct ConfigurationError: Error, CustomStringConvertible {
        public let description: String
    }

    public let configuration: Configuration
    /// Verified chains by JWS header segment (the same for every JWS one leaf signs).
    private let chains = BoundedCache<HeaderKey, VerifiedChain>(capacity: 64)

    public init(configuration: Configuration) throws(ConfigurationError) {
        if configuration.allowsXcode && configuration.environments.contains(.production) {
            throw ConfigurationError(description: "Xcode signed data may not be accepted by a configuration that accepts Production")
        }
        if configuration.allowsXcode && configuration.xcodeCertificates.isEmpty {
            throw ConfigurationError(description: "Xcode signed data needs the app's StoreKit Testing certificate pinned (any self-signed certificate would pass otherwise)")
        }
        guard !configuration.anchors.isEmpty || configuration.allowsXcode else {
            throw ConfigurationError(description: "a signed-data verifier needs at least one pinned root certificate")
        }
        self.configuration = configuration
    }

    /// Verifies a JWS and returns its decoded payload.
    nonisolated(nonsending) public func verify<Payload: AppStoreSignedPayload>(_ jws: String, as type: Payload.Type) async throws(SignedDataError) -> Payload {
        let token = try CompactJWS(jws)
        // A header seen before already passed the alg and x5c checks and its chain validated:
        // skip decoding its certificates.
        let cached = chains[HeaderKey(token.headerSegment)]
        let header = cached == nil ? try token.header() : nil
        if let header {
            guard header.alg == "ES256" else {
                throw SignedDataError(.invalidJWTFormat, "alg must be ES256, got '\(header.alg.prefix(20))'")
            }
        }
        let payload: Payload
        do {
            payload = try Payload.decodePayload(from: try token.payload())
        } catch let error as SignedDataError {
            throw error
        } catch {
            throw SignedDataError(.invalidJWTFormat, "payload is not a valid \(Payload.self)")
        }
        let signature = try token.signature()

        let environments: Set<AppStoreEnvironment>
        switch header?.x5c.count {
        case nil, 3:
            environments = try await verifyChainAndSignature(
                token, signature: signature, x5c: header?.x5c, cached: cached, at: payload.validationDate
            )
        case 1 where configuration.allowsXcode:
            try verifyXcode(token, certificate: header!.x5c[0], signature: signature)
            environments = [.xcode]
        case let count?:
            throw SignedDataError(.invalidJWTFormat, "x5c must hold exactly 3 certificates, got \(count)")
        }
        try checkClaims(of: payload, rootEnvironments: environments)
        return payload
    }

    nonisolated(nonsending) private func verifyChainAndSignature(
        _ token: CompactJWS, signature: Data, x5c: [String]?, cached: VerifiedChain?, at signedDate: Date?
    ) async throws(SignedDataError) -> Set<AppStoreEnvironment> {
        let now = configuration.now()
        let validationTime = signedDate ?? now
        if validationTime.timeIntervalSince(now) > configuration.futureTolerance {
            throw SignedDataError(.verificationFailure, "signedDate is \(validationTime.timeIntervalSince(now).rounded()) s in the future")
        }
        let chain: VerifiedChain
        if let cached, cached.validity.contains(validationTime) {
            chain = cached
        } else {
            let certificates: [String]
            if let x5c { certificates = x5c } else { certificates = try token.header().x5c }
            chain = try await validateChain(certificates, at: validationTime)
            chains[HeaderKey(token.headerSegment)] = chain
        }
        guard signature.count == 64,
              let ecdsa = try? P256.Signing.ECDSASignature(rawRepresentation: signature),
              chain.leafKey.isValidSignature(ecdsa, for: Data(token.signingInput))
        else {
            throw SignedDataError(.verificationFailure, "signature does not verify with the leaf key (ES256 needs a 64-byte R‖S signature)")
        }
        return chain.environments
    }

    func validateChain(_ x5c: [String], at time: Date) async throws(SignedDataError) -> VerifiedChain {
        var certificates: [Certificate] = []
        for (index, encoded) in x5c.prefix(2).enumerated() {
            guard let der = Data(base64Encoded: encoded), let certificate = try? Certificate(derEncoded: [UInt8](der)) else {
                throw SignedDataError(.invalidCertificate, "x5c[\(index)] is not a base64 DER certificate")
            }
            certificates.append(certificate)
        }
        let leaf = certificates[0]
        let intermediate = certificates[1]
        var verifier = Verifier(rootCertificates: CertificateStore(configuration.anchors.map(\.certificate))) {
            RFC5280Policy(fixedExpiryValidationTime: time)
            AppleOIDPolicy()
        }
        let result = await verifier.validate(leaf: leaf, intermediates: CertificateStore([intermediate]))
        guard case .validCertificate(let chain) = result else {
            throw SignedDataError(.verificationFailure, Self.describeChainFailure(result, leaf: leaf, intermediate: intermediate, at: time))
        }
        guard chain.count == 3, chain[1] == intermediate, let root = chain.last,
              let anchor = configuration.anchors.first(where: { $0.certificate == root })
        else {
            throw SignedDataError(.verificationFailure, "chain does not run leaf → x5c[1] → pinned root")
        }
        guard let leafKey = P256.Signing.PublicKey(leaf.publicKey) else {
            throw SignedDataError(.verificationFailure, "leaf key is not P-256")
        }
        let notBefore = chain.map(\.notValidBefore).max()!
        let notAfter = chain.map(\.notValidAfter).min()!
        return VerifiedChain(leafKey: leafKey, environments: anchor.environments, validity: notBefore...notAfter)
    }

    private static func describeChainFailure(_ result: CertificateValidationResult, leaf: Certificate, intermediate: Certificate, at time: Date) -> String {
        guard case .couldNotValidate(let failures) = result, let first = failures.first else {
            return "x5c[0] → x5c[1] does not reach a pinned root"
        }
        return "chain rejected at \(time.formatted(.iso8601)): \(first.policyFailureReason)"
    }

    private func verifyXcode(_ token: CompactJWS, certificate encoded: String, signature: Data) throws(SignedDataError) {
        guard let der = Data(base64Encoded: encoded), let certificate = try? Certificate(derEncoded: [UInt8](der)) else {
            throw SignedDataError(.invalidCertificate, "x5c[0] is not a base64 DER certificate")
        }
        guard configuration.xcodeCertificates.contains(certificate) else {
            throw SignedDataError(.verificationFailure, "Xcode certificate is not one of the pinned StoreKit Testing certificates")
        }
        guard let key = P256.Signing.PublicKey(certificate.publicKey), signature.count == 64,
              let ecdsa = try? P256.Signing.ECDSASignature(rawRepresentation: signature),
              key.isValidSignature(ecdsa, for: Data(token.signingInput))
        else {
            throw SignedDataError(.verificationFailure, "Xcode signature does not verify with its certificate")
        }
    }

    private func checkClaims(of payload: some AppStoreSignedPayload, rootEnvironments: Set<AppStoreEnvironment>) throws(SignedDataError) {
        let type = type(of: payload)
        if let bundleId = configuration.bundleId, type.carriesBundleId, payload.claimedBundleId != bundleId {
            throw SignedDataError(.invalidAppIdentifier, "bundleId '\(payload.claimedBundleId ?? "none")' is not '\(bundleId)'")
        }
        guard let environment = payload.claimedEnvironment else {
            throw SignedDataError(.invalidEnvironment, "payload names no environment")
        }
        guard rootEnvironments.contains(environment) else {
            throw SignedDataError(.invalidEnvironment, "environment \(environment) cannot be signed by this root")
        }
        guard configuration.environments.contains(environment) else {
            throw SignedDataError(.invalidEnvironment, "environment \(environment) is not accepted by this app")
        }
        if environment == .production, type.carriesAppAppleId, let appAppleId = configuration.appAppleId, payload.claimedAppAppleId != appAppleId {
            throw SignedDataError(.invalidAppIdentifier, "appAppleId \(payload.claimedAppAppleId.map(String.init) ?? "none") is not \(appAppleId)")
        }
    }
}

extension SignedDataVerifier {
    /// A verified notification with its nested transaction and renewal info, each verified on its own.
    public struct VerifiedNotification: Sendable {
        public var notification: NotificationPayload
        public var transaction: TransactionPayload?
        public var renewalInfo: RenewalInfoPayload?
    }

    nonisolated(nonsending) public func verifyNotification(_ jws: String) async throws(SignedDataError) -> VerifiedNotification {
        let notification = try await verify(jws, as: NotificationPayload.self)
        var result = VerifiedNotification(notification: notification)
        if let nested = notification.data?.signedTransactionInfo {
            result.transaction = try await verify(nested, as: TransactionPayload.self)
        }
        if let nested = notification.data?.signedRenewalInfo {
            result.renewalInfo = try await verify(nested, as: RenewalInfoPayload.self)
        }
        return result
    }
}

/// A JWS header segment as a cache key. Hashing reads the first 256 bytes (they hold the start of
/// the leaf certificate, which differs between leaves) instead of all ~2.5 KB; equality compares
/// everything.
struct HeaderKey: Hashable, Sendable {
    let bytes: ArraySlice<UInt8>

    init(_ bytes: ArraySlice<UInt8>) {
        self.bytes = bytes
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(bytes.count)
        bytes.prefix(256).withUnsafeBytes { hasher.combine(bytes: $0) }
    }

    static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.bytes.count == rhs.bytes.count && lhs.bytes.withUnsafeBytes { left in
            rhs.bytes.withUnsafeBytes { right in memcmp(left.baseAddress!, right.baseAddress!, left.count) == 0 }
        }
    }
}

/// A chain that passed validation: the leaf's key, what its root vouches for, and when.
struct VerifiedChain: Sendable {
    let leafKey: P256.Signing.PublicKey
    let environments: Set<AppStoreEnvironment>
    let validity: ClosedRange<Date>
}

extension SignedDataVerifier {
    /// Verifies a JWS of any kind (notification, app transaction, renewal info or transaction,
    /// told apart by their fields) and returns its payload as pretty, sorted JSON.
    nonisolated(nonsending) public func verifyPayload(_ jws: String) async throws(SignedDataError) -> Data {
        let token = try CompactJWS(jws)
        _ = try token.header()
        let payload = try token.payload()
        guard let fields = try? JSONSerialization.jsonObject(with: payload) as? [String: Any] else {
            throw SignedDataError(.invalidJWTFormat, "payload is not a JSON object")
        }
        if fields["notificationUUID"] != nil || fields["notificationType"] != nil {
            _ = try await verify(jws, as: NotificationPayload.self)
        } else if fields["receiptType"] != nil {
            _ = try await verify(jws, as: AppTransactionPayload.self)
        } else if fields["transactionId"] == nil && (fields["autoRenewStatus"] != nil || fields["autoRenewProductId"] != nil) {
            _ = try await verify(jws, as: RenewalInfoPayload.self)
        } else {
            _ = try await verify(jws, as: TransactionPayload.self)
        }
        // Verified: print exactly the signed fields, including any this version does not model.
        return (try? JSONSerialization.data(withJSONObject: fields, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes])) ?? payload
    }
}

extension SignedDataVerifier {
    /// The bundle id a notification *claims*, read without any verification: only for choosing
    /// which app's verifier to run. Nil when the JWS cannot be read.
    public static func claimedBundleId(ofNotification jws: String) -> String? {
        guard let token = try? CompactJWS(jws), let payload = try? token.payload() else { return nil }
        return (try? AppStoreJSON.decode(NotificationPayload.self, from: payload))?.claimedBundleId
    }
}
