import CountersignCore
import Foundation

/// A JSON writer for the answers on the hot path, held byte for byte equal to `WireJSON.encode`
/// (Foundation's `JSONEncoder` with sorted keys and unescaped slashes) by tests. The encoder
/// costs tens of microseconds per CustomerInfo (reflection over every nested value, a dictionary
/// per object, sorting); this appends bytes to one buffer.
///
/// Foundation's rules it follows: object keys sorted by their UTF-8 bytes (not by Swift's
/// `String` order, which compares canonically equivalent scalars), `nil` optionals left out,
/// strings written as their UTF-8 bytes with `"` `\` and the C0 controls escaped (`\b` `\f` `\n`
/// `\r` `\t`, the rest as `\u00xx`) and nothing else escaped, integers in decimal.
public struct LeanJSONWriter {
    public private(set) var bytes: [UInt8] = []

    public init(capacity: Int = 1024) {
        bytes.reserveCapacity(capacity)
    }

    public mutating func raw(_ text: StaticString) {
        text.withUTF8Buffer { bytes.append(contentsOf: $0) }
    }

    public mutating func byte(_ value: UInt8) {
        bytes.append(value)
    }

    public mutating func append(contentsOf other: [UInt8]) {
        bytes.append(contentsOf: other)
    }

    private static let hex: [UInt8] = Array("0123456789abcdef".utf8)

    public mutating func string(_ value: String) {
        bytes.append(UInt8(ascii: "\""))
        var value = value
        value.withUTF8 { utf8 in
            var start = 0
            for index in 0..<utf8.count {
                let byte = utf8[index]
                guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
                bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[start..<index]))
                start = index + 1
                bytes.append(UInt8(ascii: "\\"))
                switch byte {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"): bytes.append(byte)
                case 0x08: bytes.append(UInt8(ascii: "b"))
                case 0x0C: bytes.append(UInt8(ascii: "f"))
                case 0x0A: bytes.append(UInt8(ascii: "n"))
                case 0x0D: bytes.append(UInt8(ascii: "r"))
                case 0x09: bytes.append(UInt8(ascii: "t"))
                default:
                    bytes.append(contentsOf: [
                        UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), Self.hex[Int(byte >> 4)], Self.hex[Int(byte & 0x0F)],
                    ])
                }
            }
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[start..<utf8.count]))
        }
        bytes.append(UInt8(ascii: "\""))
    }

    public mutating func integer(_ value: Int64) {
        if value < 0 {
            bytes.append(UInt8(ascii: "-"))
        }
        var magnitude = value.magnitude
        var digits: [UInt8] = []
        repeat {
            digits.append(UInt8(ascii: "0") + UInt8(magnitude % 10))
            magnitude /= 10
        } while magnitude > 0
        bytes.append(contentsOf: digits.reversed())
    }

    public mutating func bool(_ value: Bool) {
        if value { raw("true") } else { raw("false") }
    }

    /// An object's members in the order written; the caller writes fixed keys already sorted and
    /// dictionaries through ``dictionary(_:value:)``. `first` tracks the separating commas.
    public mutating func member(_ key: StaticString, first: inout Bool) {
        if !first { bytes.append(UInt8(ascii: ",")) }
        first = false
        bytes.append(UInt8(ascii: "\""))
        raw(key)
        raw("\":")
    }

    /// An optional string member, left out when nil (as `encodeIfPresent` does).
    public mutating func member(_ key: StaticString, _ value: String?, first: inout Bool) {
        guard let value else { return }
        member(key, first: &first)
        string(value)
    }

    /// An optional string member written `null` when nil, as RevenueCat writes its nullable
    /// fields (a client testing `=== null` finds the key).
    public mutating func nullable(_ key: StaticString, _ value: String?, first: inout Bool) {
        member(key, first: &first)
        if let value { string(value) } else { raw("null") }
    }

    /// RevenueCat's `price` member: `{"amount":…,"currency":…}`, or `null`. The amount is written
    /// as Foundation writes a `Double` (its shortest form, without a trailing `.0`).
    mutating func price(_ value: SubscriberResponse.Price?, first: inout Bool) {
        member("price", first: &first)
        guard let value else { return raw("null") }
        var amount = value.amount.description
        if amount.hasSuffix(".0") { amount.removeLast(2) }
        raw("{\"amount\":")
        bytes.append(contentsOf: Array(amount.utf8))
        raw(",\"currency\":")
        string(value.currency)
        byte(UInt8(ascii: "}"))
    }

    /// A JSON object of a dictionary, keys in UTF-8 byte order.
    public mutating func dictionary<Value>(_ dictionary: [String: Value], value write: (inout LeanJSONWriter, Value) -> Void) {
        bytes.append(UInt8(ascii: "{"))
        let keys = dictionary.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        for (index, key) in keys.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            string(key)
            bytes.append(UInt8(ascii: ":"))
            write(&self, dictionary[key]!)
        }
        bytes.append(UInt8(ascii: "}"))
    }
}

extension SubscriberResponse {
    /// The answer's JSON, byte for byte `WireJSON.encode(self)` (trailing newline included).
    public func leanJSON() -> [UInt8] {
        LeanJSONWriter.subscriberResponse(requestDate: requestDate, requestDateMs: requestDateMs, subscriber: subscriber.leanJSON())
    }
}

extension LeanJSONWriter {
    /// `{"request_date":…,"request_date_ms":…,"subscriber":…}` and a newline, around a
    /// subscriber already written by ``SubscriberResponse/Subscriber/leanJSON()``.
    /// `leading` is one more member already written (`"key":value`) whose key sorts before
    /// `request_date`, as `purchase_status` and `created` do; it goes first.
    public static func subscriberResponse(requestDate: String, requestDateMs: Int64, subscriber: [UInt8], leading: [UInt8] = []) -> [UInt8] {
        var writer = LeanJSONWriter(capacity: subscriber.count + leading.count + 80)
        writer.raw("{")
        if !leading.isEmpty {
            writer.append(contentsOf: leading)
            writer.raw(",")
        }
        writer.raw(#""request_date":"#)
        writer.string(requestDate)
        writer.raw(#","request_date_ms":"#)
        writer.integer(requestDateMs)
        writer.raw(#","subscriber":"#)
        writer.append(contentsOf: subscriber)
        writer.raw("}\n")
        return writer.bytes
    }
}

extension SubscriberResponse.Subscriber {
    /// The subscriber's JSON, keys sorted, RevenueCat's nullable fields written as `null`
    /// (Tests/Fixtures/golden holds its bytes).
    public func leanJSON() -> [UInt8] {
        var writer = LeanJSONWriter()
        var first = true
        writer.byte(UInt8(ascii: "{"))
        writer.member("entitlements", first: &first)
        writer.dictionary(entitlements) { writer, entitlement in
            var first = true
            writer.byte(UInt8(ascii: "{"))
            writer.nullable("expires_date", entitlement.expiresDate, first: &first)
            writer.nullable("grace_period_expires_date", entitlement.gracePeriodExpiresDate, first: &first)
            writer.member("product_identifier", entitlement.productIdentifier, first: &first)
            writer.member("purchase_date", entitlement.purchaseDate, first: &first)
            writer.byte(UInt8(ascii: "}"))
        }
        writer.member("first_seen", firstSeen, first: &first)
        writer.member("last_seen", lastSeen, first: &first)
        writer.nullable("management_url", managementUrl, first: &first)
        writer.member("non_subscriptions", first: &first)
        writer.dictionary(nonSubscriptions) { writer, purchases in
            writer.byte(UInt8(ascii: "["))
            for (index, purchase) in purchases.enumerated() {
                if index > 0 { writer.byte(UInt8(ascii: ",")) }
                var first = true
                writer.byte(UInt8(ascii: "{"))
                writer.member("id", purchase.id, first: &first)
                writer.member("is_sandbox", first: &first)
                writer.bool(purchase.isSandbox)
                writer.nullable("original_purchase_date", purchase.originalPurchaseDate, first: &first)
                writer.price(purchase.price, first: &first)
                writer.member("purchase_date", purchase.purchaseDate, first: &first)
                writer.member("store", purchase.store, first: &first)
                writer.member("store_transaction_id", purchase.id, first: &first)
                writer.byte(UInt8(ascii: "}"))
            }
            writer.byte(UInt8(ascii: "]"))
        }
        writer.member("original_app_user_id", originalAppUserId, first: &first)
        writer.nullable("original_application_version", originalApplicationVersion, first: &first)
        writer.nullable("original_purchase_date", originalPurchaseDate, first: &first)
        writer.member("other_purchases", first: &first)
        writer.raw("{}")
        if let subscriberAttributes {
            writer.member("subscriber_attributes", first: &first)
            writer.dictionary(subscriberAttributes) { writer, attribute in
                var first = true
                writer.byte(UInt8(ascii: "{"))
                writer.member("updated_at_ms", first: &first)
                writer.integer(attribute.updatedAtMs)
                writer.nullable("value", attribute.value, first: &first)
                writer.byte(UInt8(ascii: "}"))
            }
        }
        writer.member("subscriptions", first: &first)
        writer.dictionary(subscriptions) { writer, subscription in
            var first = true
            writer.byte(UInt8(ascii: "{"))
            writer.nullable("auto_resume_date", nil, first: &first)
            writer.nullable("billing_issues_detected_at", subscription.billingIssuesDetectedAt, first: &first)
            writer.nullable("display_name", subscription.displayName, first: &first)
            writer.nullable("expires_date", subscription.expiresDate, first: &first)
            writer.nullable("grace_period_expires_date", subscription.gracePeriodExpiresDate, first: &first)
            writer.member("is_sandbox", first: &first)
            writer.bool(subscription.isSandbox)
            writer.member("original_purchase_date", subscription.originalPurchaseDate, first: &first)
            writer.nullable("ownership_type", subscription.ownershipType, first: &first)
            writer.member("period_type", subscription.periodType, first: &first)
            writer.price(subscription.price, first: &first)
            writer.member("purchase_date", subscription.purchaseDate, first: &first)
            writer.nullable("refunded_at", subscription.refundedAt, first: &first)
            writer.member("store", subscription.store, first: &first)
            writer.nullable("store_transaction_id", subscription.storeTransactionId, first: &first)
            writer.nullable("unsubscribe_detected_at", subscription.unsubscribeDetectedAt, first: &first)
            writer.byte(UInt8(ascii: "}"))
        }
        writer.byte(UInt8(ascii: "}"))
        return writer.bytes
    }
}
