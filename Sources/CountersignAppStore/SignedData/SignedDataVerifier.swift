import CountersignCore
import CountersignServerCore
import Crypto
import Foundation
@_spi(FixedExpiryValidationTime) import X509

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
/// It answers as Apple's App Store Server Library (`SignedDataVerifier`, offline) answers, with
/// the same `VerificationStatus` for the same reason, checked in the same order; a differential
/// suite (`scripts/appstore-differential`) holds the two together. The checks: three unpadded
/// base64url segments; a header that is one JSON object whose `crit` names nothing but `b64`; a
/// payload that is one JSON object; a non-empty `x5c`; `alg` ES256; the signed date
/// (`signedDate`, else `receiptCreationDate`, else now) no more than five minutes ahead; exactly
/// three `x5c` entries; the first two base64 DER certificates; leaf → `x5c[1]` → a pinned root
/// valid at the signed date, with Apple's OIDs and OpenSSL's strict-mode key identifiers
/// (`x5c[2]` is never used); the raw R‖S ES256 signature; the JWT claims a JWT library checks
/// (`exp`, `nbf`, `iat`, `aud`, `sub`, `jti`); the payload's field types; then bundle id, app
/// Apple id (Production) and environment. Deliberately stricter than Apple: padded base64url,
/// repeated JSON keys, text that is not UTF-8, fields of the wrong JSON type and signed dates
/// more than five minutes ahead are refused (the suite lists each with its reason).
/// A chain that has passed once is cached by its header, so a repeat costs one signature check.
public final class SignedDataVerifier: Sendable {
    public struct Configuration: Sendable {
        /// Pinned roots with the environments each may vouch for.
        public var anchors: [TrustAnchor]
        /// The app's bundle id; nil skips the check (tools only).
        public var bundleId: String?
        /// The app's Apple ID in App Store Connect; required when Production is accepted, and
        /// checked on notifications and app transactions (the kinds that carry it).
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
        /// Ask what OpenSSL's strict mode asks of the chain (key identifiers, the intermediate's
        /// key usage), as Apple's `SignedDataVerifier` always does. Apple's own test certificates
        /// lack key identifiers and its test suite turns strict mode off for them; ours does the
        /// same for those vectors, and nothing else should.
        public var requiresKeyIdentifiers = true
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

    /// What to say when Production is accepted without the app's Apple ID.
    public static let missingAppAppleIdMessage =
        "appAppleId is required for an app that accepts Production data (Apple's library refuses "
        + "the same configuration): it is the app's Apple ID, a number shown in App Store Connect under "
        + "General > App Information"

    public init(configuration: Configuration) throws(ConfigurationError) {
        if configuration.environments.contains(.production) && configuration.appAppleId == nil {
            throw ConfigurationError(description: Self.missingAppAppleIdMessage)
        }
        if configuration.allowsXcode && configuration.environments.contains(.production) {
            throw ConfigurationError(description: "Xcode signed data may not be accepted by a configuration that accepts Production")
        }
        if configuration.allowsXcode && configuration.xcodeCertificates.isEmpty {
            throw ConfigurationError(
                description:
                    "Xcode signed data needs the app's StoreKit Testing certificate pinned (any self-signed certificate would pass otherwise)")
        }
        guard !configuration.anchors.isEmpty || configuration.allowsXcode else {
            throw ConfigurationError(description: "a signed-data verifier needs at least one pinned root certificate")
        }
        self.configuration = configuration
    }

    /// Verifies a JWS and returns its decoded payload.
    nonisolated(nonsending) public func verify<Payload: AppStoreSignedPayload>(_ jws: String, as type: Payload.Type) async throws(SignedDataError)
        -> Payload
    {
        let token = try CompactJWS(jws)
        // A header seen before already passed every header check and its chain validated: skip
        // decoding its certificates.
        let cached = chains[HeaderKey(token.headerSegment)]
        let header = cached == nil ? try token.header() : nil
        let fields = try Self.payloadFields(try token.payload())
        let signature = try token.signature()
        if let header {
            guard case .certificates = header.x5c else {
                if case .missing = header.x5c { throw .failure(.missingChain, "the header has no x5c certificate chain") }
                throw SignedDataError(.invalidChainLength, .chainLength, "x5c is not a list of three certificates")
            }
            guard header.alg == "ES256" else {
                throw .failure(.algorithm, "alg must be ES256, got '\((header.alg ?? "none").prefix(20))'")
            }
        }
        let signedDate = try Self.signedDate(in: fields)
        // The clock, read once for the whole verification.
        let now = configuration.now()
        let environments: Set<AppStoreEnvironment>
        switch header.flatMap({ if case .certificates(let entries) = $0.x5c { entries } else { nil } }) {
        case nil:
            environments = try await verifyChainAndSignature(token, signature: signature, x5c: nil, cached: cached, at: signedDate, now: now)
        case let entries? where entries.count == 3:
            environments = try await verifyChainAndSignature(token, signature: signature, x5c: entries, cached: cached, at: signedDate, now: now)
        case let entries? where entries.count == 1 && configuration.allowsXcode:
            // The same bound on the signed date as Apple-signed data: a far-future date would
            // make this copy outrank every later genuine one.
            try checkFutureDate(signedDate ?? now, now: now)
            try verifyXcode(token, certificate: entries[0], signature: signature)
            environments = [.xcode]
        case let entries?:
            throw SignedDataError(.invalidChainLength, .chainLength, "x5c must hold exactly 3 certificates, got \(entries.count)")
        }
        try Self.checkJWTClaims(fields, now: now)
        let payload: Payload
        do {
            payload = try Payload.decodeVerified(from: fields)
        } catch {
            throw .failure(.fieldType, "payload is not a valid \(Payload.self): \((error as? DecodingError)?.shortDescription ?? "\(error)")")
        }
        try checkClaims(of: payload, rootEnvironments: environments)
        return payload
    }

    /// The payload: one JSON object in UTF-8, no key named twice.
    static func payloadFields(_ data: Data) throws(SignedDataError) -> [String: JSONValue] {
        do {
            return try JSONValue.parseObject(data)
        } catch {
            throw .malformedJSON(data, error, part: "payload")
        }
    }

    /// The date the chain is validated at: `signedDate`, else `receiptCreationDate` (an app
    /// transaction without one), else nil for now; whole seconds, rounded down, as Apple's
    /// library takes it.
    static func signedDate(in fields: [String: JSONValue]) throws(SignedDataError) -> Date? {
        func present(_ key: String) -> JSONValue? {
            if case .null? = fields[key] { return nil }
            return fields[key]
        }
        guard let value = present("signedDate") ?? present("receiptCreationDate") else { return nil }
        guard case .number(let text) = value, let milliseconds = Double(text), milliseconds.isFinite else {
            if case .string = value { throw .failure(.fieldType, "signedDate is a string, not a number of milliseconds") }
            throw .failure(.signedDate, "signedDate is not a number of milliseconds")
        }
        return Date(timeIntervalSince1970: (milliseconds.rounded(.towardZero) / 1000).rounded(.down))
    }

    /// The registered JWT claims, checked as a JWT library checks them (Apple's library decodes
    /// with PyJWT's defaults): App Store data carries none of them, so these only refuse.
    static func checkJWTClaims(_ fields: [String: JSONValue], now: Date) throws(SignedDataError) {
        let seconds = now.timeIntervalSince1970
        func integer(_ claim: String) throws(SignedDataError) -> Double? {
            guard let value = fields[claim] else { return nil }
            guard case .number(let text) = value, let number = Double(text), number.isFinite else {
                throw .failure(.jwtClaims, "\(claim) must be an integer")
            }
            return number.rounded(.towardZero)
        }
        if let issuedAt = try integer("iat"), issuedAt > seconds { throw .failure(.jwtClaims, "iat is in the future") }
        if let notBefore = try integer("nbf"), notBefore > seconds { throw .failure(.jwtClaims, "nbf is in the future") }
        if let expiry = try integer("exp"), expiry <= seconds { throw .failure(.jwtClaims, "exp has passed") }
        if let audience = fields["aud"], audience.isTruthy {
            throw .failure(.jwtClaims, "aud names an audience; App Store data is addressed to nobody")
        }
        for claim in ["sub", "jti"] {
            if let value = fields[claim], case .string = value {
            } else if fields[claim] != nil {
                throw .failure(.jwtClaims, "\(claim) must be a string")
            }
        }
    }

    nonisolated(nonsending) private func verifyChainAndSignature(
        _ token: CompactJWS, signature: Data, x5c: [JSONValue]?, cached: VerifiedChain?, at signedDate: Date?, now: Date
    ) async throws(SignedDataError) -> Set<AppStoreEnvironment> {
        let validationTime = signedDate ?? now
        try checkFutureDate(validationTime, now: now)
        let chain: VerifiedChain
        if let cached, cached.validity.contains(validationTime) {
            chain = cached
        } else {
            let entries: [JSONValue]
            if let x5c {
                entries = x5c
            } else if case .certificates(let fromHeader) = try token.header().x5c, fromHeader.count == 3 {
                entries = fromHeader
            } else {
                throw SignedDataError(.invalidChainLength, .chainLength, "x5c must hold exactly 3 certificates")
            }
            chain = try await validateChain(entries, at: validationTime)
            chains[HeaderKey(token.headerSegment)] = chain
        }
        guard signature.count == 64,
            let ecdsa = try? P256.Signing.ECDSASignature(rawRepresentation: signature),
            chain.leafKey.isValidSignature(ecdsa, for: Data(token.signingInput))
        else {
            throw .failure(.signature, "signature does not verify with the leaf key (ES256 needs a 64-byte R‖S signature)")
        }
        return chain.environments
    }

    private func checkFutureDate(_ signedDate: Date, now: Date) throws(SignedDataError) {
        if signedDate.timeIntervalSince(now) > configuration.futureTolerance {
            throw .failure(.futureSignedDate, "signedDate is \(signedDate.timeIntervalSince(now).rounded()) s in the future")
        }
    }

    /// One `x5c` entry: standard, padded base64 of a DER certificate.
    private static func certificate(_ entry: JSONValue, index: Int) throws(SignedDataError) -> Certificate {
        guard case .string(let encoded) = entry, let der = Data(base64Encoded: encoded),
            let certificate = try? Certificate(derEncoded: [UInt8](der))
        else {
            throw SignedDataError(.invalidCertificate, .certificateEncoding, "x5c[\(index)] is not a base64 DER certificate")
        }
        return certificate
    }

    func validateChain(_ x5c: [JSONValue], at time: Date) async throws(SignedDataError) -> VerifiedChain {
        let leaf = try Self.certificate(x5c[0], index: 0)
        let intermediate = try Self.certificate(x5c[1], index: 1)
        var verifier = Verifier(rootCertificates: CertificateStore(configuration.anchors.map(\.certificate))) {
            RFC5280Policy(fixedExpiryValidationTime: time)
            AppleOIDPolicy(requiresKeyIdentifiers: configuration.requiresKeyIdentifiers)
        }
        let result = await verifier.validate(leaf: leaf, intermediates: CertificateStore([intermediate]))
        guard case .validCertificate(let chain) = result else {
            throw .failure(.untrustedChain, Self.describeChainFailure(result, at: time))
        }
        guard chain.count == 3, chain[1] == intermediate, let root = chain.last,
            let anchor = configuration.anchors.first(where: { $0.certificate == root })
        else {
            throw .failure(.untrustedChain, "chain does not run leaf → x5c[1] → pinned root")
        }
        guard let leafKey = P256.Signing.PublicKey(leaf.publicKey) else {
            throw .failure(.signature, "leaf key is not P-256")
        }
        let notBefore = chain.map(\.notValidBefore).max()!
        let notAfter = chain.map(\.notValidAfter).min()!
        return VerifiedChain(leafKey: leafKey, environments: anchor.environments, validity: notBefore...notAfter)
    }

    private static func describeChainFailure(_ result: CertificateValidationResult, at time: Date) -> String {
        guard case .couldNotValidate(let failures) = result, let first = failures.first else {
            return "x5c[0] → x5c[1] does not reach a pinned root"
        }
        return "chain rejected at \(time.formatted(.iso8601)): \(first.policyFailureReason)"
    }

    private func verifyXcode(_ token: CompactJWS, certificate entry: JSONValue, signature: Data) throws(SignedDataError) {
        let certificate = try Self.certificate(entry, index: 0)
        guard configuration.xcodeCertificates.contains(certificate) else {
            throw .failure(.xcodeCertificate, "Xcode certificate is not one of the pinned StoreKit Testing certificates")
        }
        guard let key = P256.Signing.PublicKey(certificate.publicKey), signature.count == 64,
            let ecdsa = try? P256.Signing.ECDSASignature(rawRepresentation: signature),
            key.isValidSignature(ecdsa, for: Data(token.signingInput))
        else {
            throw .failure(.signature, "Xcode signature does not verify with its certificate")
        }
    }

    /// Bundle id, app Apple id and environment, in the order Apple's library checks them.
    private func checkClaims(of payload: some AppStoreSignedPayload, rootEnvironments: Set<AppStoreEnvironment>) throws(SignedDataError) {
        let type = type(of: payload)
        let environment = payload.claimedEnvironment
        if let bundleId = configuration.bundleId, type.carriesBundleId, payload.claimedBundleId != bundleId {
            throw SignedDataError(.invalidAppIdentifier, .bundleId, "bundleId '\(payload.claimedBundleId ?? "none")' is not '\(bundleId)'")
        }
        // Apple's verifier serves one environment and checks the app id whenever it is
        // Production; one that accepts several checks it on data that claims Production.
        let appleIdApplies = environment == .production || configuration.environments == [.production]
        if type.carriesAppAppleId, configuration.environments.contains(.production), appleIdApplies,
            payload.claimedAppAppleId != configuration.appAppleId
        {
            throw SignedDataError(
                .invalidAppIdentifier, .appAppleId,
                "appAppleId \(payload.claimedAppAppleId.map(String.init) ?? "none") is not \(configuration.appAppleId.map(String.init) ?? "none")")
        }
        guard let environment else {
            throw SignedDataError(.invalidEnvironment, .environment, "payload names no environment")
        }
        guard rootEnvironments.contains(environment) else {
            throw SignedDataError(.invalidEnvironment, .environment, "environment \(environment) cannot be signed by this root")
        }
        guard configuration.environments.contains(environment) else {
            throw SignedDataError(.invalidEnvironment, .environment, "environment \(environment) is not accepted by this app")
        }
    }
}

extension JSONValue {
    /// Python's truth value of the same JSON (what a JWT library written in Python tests).
    var isTruthy: Bool {
        switch self {
        case .null: false
        case .bool(let value): value
        case .number(let text): Double(text).map { $0 != 0 } ?? true
        case .string(let value): !value.isEmpty
        case .array(let elements): !elements.isEmpty
        case .object(let members): !members.isEmpty
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
        lhs.bytes.count == rhs.bytes.count
            && lhs.bytes.withUnsafeBytes { left in
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
    /// The kinds of App Store signed data, each verified as Apple's library verifies it.
    public enum Kind: String, Sendable, CaseIterable {
        case transaction, renewalInfo, notification, appTransaction

        /// The kind a payload looks like, by the fields only that kind has.
        static func guess(_ fields: [String: JSONValue]) -> Kind {
            let has = { (names: [String]) in names.contains { fields[$0] != nil } }
            if has(["notificationType", "notificationUUID", "data", "summary", "externalPurchaseToken", "appData"]) { return .notification }
            if has(["receiptType", "receiptCreationDate", "originalApplicationVersion", "applicationVersion"]) { return .appTransaction }
            if !has(["transactionId"]) && has(["autoRenewStatus", "autoRenewProductId", "renewalDate", "expirationIntent"]) { return .renewalInfo }
            return .transaction
        }
    }

    /// Verifies a JWS of the given kind (or the kind its fields suggest) and returns its payload
    /// as pretty, sorted JSON: exactly the signed fields, including any this version does not model.
    nonisolated(nonsending) public func verifyPayload(_ jws: String, kind: Kind? = nil) async throws(SignedDataError) -> Data {
        // A payload that cannot be read is reported by `verify`, in Apple's order of checks.
        let payload = try? CompactJWS(jws).payload()
        switch kind ?? payload.flatMap({ try? Self.payloadFields($0) }).map(Kind.guess) ?? .transaction {
        case .notification: _ = try await verify(jws, as: NotificationPayload.self)
        case .appTransaction: _ = try await verify(jws, as: AppTransactionPayload.self)
        case .renewalInfo: _ = try await verify(jws, as: RenewalInfoPayload.self)
        case .transaction: _ = try await verify(jws, as: TransactionPayload.self)
        }
        let verified = try CompactJWS(jws).payload()
        let object = try? JSONSerialization.jsonObject(with: verified)
        return object.flatMap { try? JSONSerialization.data(withJSONObject: $0, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]) }
            ?? verified
    }
}

extension SignedDataVerifier {
    /// The bundle id a notification *claims*, read without any verification: only for choosing
    /// which app's verifier to run. Nil when the JWS cannot be read.
    public static func claimedBundleId(ofNotification jws: String) -> String? {
        guard let token = try? CompactJWS(jws), let payload = try? token.payload(),
            let fields = try? payloadFields(payload)
        else { return nil }
        // The section Apple's library reads the bundle id from; the rest is judged by `verify`.
        for section in ["data", "summary", "externalPurchaseToken", "appData"] {
            guard let value = fields[section] else { continue }
            if case .null = value { continue }
            guard case .object(let members) = value, case .string(let bundleId)? = members["bundleId"] else { return nil }
            return bundleId
        }
        return nil
    }
}
