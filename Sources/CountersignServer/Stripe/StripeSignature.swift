import Crypto
import Foundation

/// Stripe's webhook signature (Stripe's "Verify webhook signatures"): the `Stripe-Signature`
/// header `t=<unix seconds>,v1=<hex>[,v1=<hex>…][,v0=…]`, where each `v1` is HMAC-SHA256 of
/// `<t>.<raw body>` under an endpoint secret. An event is taken when some `v1` matches under one
/// of the app's secrets (compared in constant time), and `t` is within the tolerance of the
/// server's clock either way (a replay of an old delivery, or a forged future one, is refused).
enum StripeSignature {
    /// Stripe's own libraries' default: five minutes.
    static let tolerance: TimeInterval = 300

    enum Refusal: Error, Equatable, CustomStringConvertible {
        case missing
        case malformed
        case outsideTolerance
        case noMatch

        var description: String {
            switch self {
            case .missing: "the request has no Stripe-Signature header"
            case .malformed: "the Stripe-Signature header is not t=…,v1=…"
            case .outsideTolerance: "the Stripe-Signature timestamp is more than five minutes from the server's clock"
            case .noMatch: "no v1 signature matches the endpoint's signing secrets"
            }
        }
    }

    /// Checks `header` over `payload` (the body's exact bytes) against `secrets` at `now`.
    static func verify(header: String?, payload: [UInt8], secrets: [String], now: Date) throws(Refusal) {
        guard let header, !header.isEmpty else { throw .missing }
        var timestamp: Int64?
        var candidates: [[UInt8]] = []
        for part in header.split(separator: ",", omittingEmptySubsequences: true) {
            let pair = part.split(separator: "=", maxSplits: 1)
            guard pair.count == 2 else { continue }
            switch pair[0].trimmingCharacters(in: .whitespaces) {
            case "t":
                guard timestamp == nil, let value = Int64(pair[1]) else { throw .malformed }
                timestamp = value
            case "v1":
                guard let bytes = hexBytes(pair[1]), bytes.count == 32 else { continue }
                candidates.append(bytes)
            default: continue
            }
        }
        guard let timestamp, !candidates.isEmpty else { throw .malformed }
        // Seconds compared as doubles: a hostile `t` near Int64's limits cannot trap.
        guard abs(Double(timestamp) - now.timeIntervalSince1970) <= tolerance else { throw .outsideTolerance }
        let signed = Array("\(timestamp).".utf8) + payload
        for secret in secrets {
            let key = SymmetricKey(data: Array(secret.utf8))
            // swift-crypto's check compares in constant time.
            if candidates.contains(where: { HMAC<SHA256>.isValidAuthenticationCode($0, authenticating: signed, using: key) }) { return }
        }
        throw .noMatch
    }

    /// The header Stripe would send for `payload` at `timestamp` under `secret` (for the tests
    /// and the bench, which sign Stripe's documented payloads as Stripe does).
    static func header(payload: [UInt8], secret: String, timestamp: Int64) -> String {
        let mac = HMAC<SHA256>.authenticationCode(for: Array("\(timestamp).".utf8) + payload, using: SymmetricKey(data: Array(secret.utf8)))
        return "t=\(timestamp),v1=" + mac.map { String(format: "%02x", $0) }.joined()
    }

    private static func hexBytes(_ text: Substring) -> [UInt8]? {
        let digits = Array(text.utf8)
        guard digits.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        func value(_ digit: UInt8) -> UInt8? {
            switch digit {
            case 48...57: digit - 48
            case 97...102: digit - 87
            case 65...70: digit - 55
            default: nil
            }
        }
        var index = 0
        while index < digits.count {
            guard let high = value(digits[index]), let low = value(digits[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        return bytes
    }
}
