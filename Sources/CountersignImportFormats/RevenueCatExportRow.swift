import CountersignAppStore
import CountersignCore
import CountersignServerCore
import Foundation

/// One row of RevenueCat's transactions export (Scheduled Data Exports, versions 3 to 7), read
/// by column name. The columns read, and what each becomes, are listed in docs/migration.md;
/// every other column is ignored. A row that cannot be taken throws a ``Refusal`` naming the
/// reason; nothing of it is written.
public struct RevenueCatExportRow: Sendable {
    public var line: Int
    public var originalAppUserId: String
    public var lastSeenAppUserId: String
    public var productId: String
    public var store: String
    public var transactionId: String
    public var originalTransactionId: String
    public var environment: AppStoreEnvironment
    public var purchased: Date
    /// `effective_end_time`, else the later of `end_time` and `grace_period_end_time`.
    public var expires: Date?
    public var refunded: Date?
    public var isAutoRenewable: Bool
    public var isTrial: Bool
    public var isIntroOffer: Bool
    public var familyShared: Bool
    /// Thousandths of the currency (`purchase_price_in_purchased_currency`, the gross price).
    public var priceMilliunits: Int64?
    public var currency: String?
    /// `entitlement_identifiers`; nil when the column is absent or empty.
    public var entitlements: [String]?
    /// `updated_at`, else the latest date the row holds: a later copy of the row replaces this one.
    public var updated: Date
    public var firstSeen: Date?
    /// `country`: where it was bought (ISO 3166-1 alpha-2, as RevenueCat writes it); nil when absent.
    public var country: String?

    public struct Refusal: Error, CustomStringConvertible {
        public var description: String
        public init(_ description: String) { self.description = description }
    }

    /// The columns a file must have (each row needs them to be imported at all).
    public static let requiredColumns = [
        "rc_original_app_user_id", "product_identifier", "start_time", "store", "store_transaction_id", "original_store_transaction_id",
    ]

    public init(_ record: DelimitedText.Record, columns: [String: Int]) throws(Refusal) {
        // PostgreSQL's text cannot hold U+0000 and SQLite's C strings end at it: refused here
        // rather than stored cut short on one database and failing the import on the other.
        if let index = record.fields.firstIndex(where: { $0.utf8.contains(0) }) {
            throw Refusal("\(columns.first { $0.value == index }?.key ?? "field \(index + 1)") holds U+0000")
        }
        let field = Fields(record: record, columns: columns)
        line = record.line
        originalAppUserId = try field.required("rc_original_app_user_id")
        lastSeenAppUserId = field.value("rc_last_seen_app_user_id_alias") ?? originalAppUserId
        productId = try field.required("product_identifier")
        store = try field.required("store")
        transactionId = try field.required("store_transaction_id")
        originalTransactionId = try field.required("original_store_transaction_id")
        // The API's own rules (`PublicRoutes.appUserId`): an id the API refuses (reserved, with
        // a control character, a NUL that SQLite's C strings would cut) is no customer's.
        for id in [originalAppUserId, lastSeenAppUserId] {
            do throws(APIError) {
                _ = try AppUserIDRules.validated(id, percentEncoded: false)
            } catch {
                throw Refusal("app user id \(String(id.prefix(40)).debugDescription): \(error.message)")
            }
        }
        if columns["is_sandbox"] != nil {
            guard let sandbox = try field.flag("is_sandbox") else { throw Refusal("is_sandbox is empty") }
            environment = sandbox ? .sandbox : .production
        } else {
            environment = .production
        }
        guard let purchased = try field.date("start_time") else { throw Refusal("start_time is empty") }
        self.purchased = purchased
        let end = try field.date("end_time")
        let grace = try field.date("grace_period_end_time")
        expires = try field.date("effective_end_time") ?? [end, grace].compactMap { $0 }.max()
        refunded = try field.date("refunded_at")
        isAutoRenewable = try field.flag("is_auto_renewable") ?? (end != nil)
        isTrial = try field.flag("is_trial_period") ?? false
        isIntroOffer = try field.flag("is_in_intro_offer_period") ?? false
        switch field.value("ownership_type")?.uppercased() {
        case nil, "PURCHASED": familyShared = false
        case "FAMILY_SHARED": familyShared = true
        case let other?: throw Refusal("ownership_type '\(other)' is neither PURCHASED nor FAMILY_SHARED")
        }
        currency = field.value("purchased_currency")?.uppercased()
        if let text = field.value("purchase_price_in_purchased_currency") ?? field.value("price_in_purchased_currency") {
            priceMilliunits = try Self.milliunits(text)
        }
        if let currency, currency.count != 3 || !currency.allSatisfy({ $0.isASCII && $0.isLetter }) {
            throw Refusal("purchased_currency '\(currency)' is not an ISO 4217 code")
        }
        entitlements = field.value("entitlement_identifiers").map(Self.identifiers)
        firstSeen = try field.date("first_seen_time")
        country = field.value("country")?.uppercased()
        updated = try field.date("updated_at") ?? [purchased, expires, refunded].compactMap { $0 }.max() ?? purchased
    }

    /// A row's fields by column name: trimmed, with an empty field or `null` read as absent.
    private struct Fields {
        var record: DelimitedText.Record
        var columns: [String: Int]

        func value(_ name: String) -> String? {
            guard let index = columns[name] else { return nil }
            let text = record.fields[index].trimmingCharacters(in: .whitespaces)
            return text.isEmpty || text.lowercased() == "null" ? nil : text
        }

        func required(_ name: String) throws(Refusal) -> String {
            guard let text = value(name) else { throw Refusal("\(name) is empty") }
            return text
        }

        func date(_ name: String) throws(Refusal) -> Date? {
            guard let text = value(name) else { return nil }
            guard let date = RevenueCatExportRow.date(text) else { throw Refusal("\(name) '\(text)' is not a date") }
            return date
        }

        func flag(_ name: String) throws(Refusal) -> Bool? {
            guard let text = value(name) else { return nil }
            switch text.lowercased() {
            case "true", "t": return true
            case "false", "f": return false
            default: throw Refusal("\(name) '\(text)' is not true, false, t or f")
            }
        }
    }

    /// A price in the purchase's currency as thousandths (RevenueCat writes `4.99`), rounded.
    public static func milliunits(_ text: String) throws(Refusal) -> Int64 {
        guard let price = Decimal(string: text, locale: Locale(identifier: "en_US_POSIX")), price >= 0, price < 1_000_000_000 else {
            throw Refusal("the price '\(text)' is not a number from 0 to 10⁹")
        }
        var milli = price * 1000
        var rounded = Decimal()
        NSDecimalRound(&rounded, &milli, 0, .plain)
        return NSDecimalNumber(decimal: rounded).int64Value
    }

    /// `entitlement_identifiers` as RevenueCat writes a string array: JSON (`["a","b"]`, spaced or
    /// over several lines), or a bare comma-separated list.
    public static func identifiers(_ text: String) -> [String] {
        if let data = text.data(using: .utf8), let array = try? JSONDecoder().decode([String].self, from: data) {
            return array.filter { !$0.isEmpty }
        }
        let bare = text.trimmingCharacters(in: CharacterSet(charactersIn: "[]{} "))
        return bare.split(separator: ",").map { $0.trimmingCharacters(in: CharacterSet(charactersIn: "\"' \n\r\t")) }.filter { !$0.isEmpty }
    }

    /// RevenueCat's UTC datetimes: `2023-01-01 08:27:06`, with optional fractional seconds, a `T`
    /// for the space, and a trailing `Z` or `+00:00` / `+0000`; any other offset is refused
    /// (every export date is UTC). The fields are checked (month 1–12, day within the month,
    /// hour < 24, minute and second < 60).
    public static func date(_ text: String) -> Date? {
        var bytes = Array(text.utf8)
        for suffix in ["Z", "+00:00", "+0000", " UTC"] where bytes.count > 19 && text.hasSuffix(suffix) {
            bytes.removeLast(suffix.utf8.count)
            break
        }
        guard bytes.count >= 19 else { return nil }
        func number(_ range: Range<Int>) -> Int? {
            var value = 0
            for index in range {
                let byte = bytes[index]
                guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
                value = value * 10 + Int(byte - UInt8(ascii: "0"))
            }
            return value
        }
        guard bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"), bytes[10] == UInt8(ascii: " ") || bytes[10] == UInt8(ascii: "T"),
            bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":"),
            let year = number(0..<4), let month = number(5..<7), let day = number(8..<10),
            let hour = number(11..<13), let minute = number(14..<16), let second = number(17..<19),
            (1...12).contains(month), day >= 1, hour < 24, minute < 60, second < 60
        else { return nil }
        var fraction = 0.0
        if bytes.count > 19 {
            // At most nine digits (nanoseconds), counted before they are read: 19 of them overflow.
            guard bytes[19] == UInt8(ascii: "."), (21...29).contains(bytes.count), let digits = number(20..<bytes.count) else { return nil }
            fraction = Double(digits) / pow(10, Double(bytes.count - 20))
        }
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
        let days = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1]
        guard day <= days else { return nil }
        // Days from 1970-01-01 to the date (proleptic Gregorian), by the civil-from-days inverse.
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let epochDays = era * 146_097 + dayOfEra - 719_468
        let seconds = Double(epochDays * 86_400 + hour * 3_600 + minute * 60 + second) + fraction
        return Date(timeIntervalSince1970: (seconds * 1000).rounded() / 1000)
    }

    /// The row as the transaction it records, unsigned, for an app that configures its product.
    public func transaction(app: AppConfiguration, kind: AppConfiguration.ProductKind) -> TransactionPayload {
        let type: ProductType =
            switch kind {
            case .autoRenewable: .autoRenewable
            case .nonRenewing: .nonRenewing
            case .consumable: .consumable
            case .nonConsumable: .nonConsumable
            }
        var payload = TransactionPayload(
            transactionId: transactionId, originalTransactionId: originalTransactionId, bundleId: app.bundleId, productId: productId,
            purchaseDate: purchased, type: type, environment: environment, signedDate: updated)
        payload.expiresDate = expires
        payload.revocationDate = refunded
        if refunded != nil { payload.revocationReason = 0 }
        payload.inAppOwnershipType = familyShared ? .familyShared : .purchased
        // RevenueCat's alpha-2 country where Apple's copy has its alpha-3 storefront: both read
        // as the country (`Storefront.countryCode`).
        payload.storefront = country
        if isTrial || isIntroOffer {
            payload.offerType = 1
            payload.offerDiscountType = isTrial ? "FREE_TRIAL" : "PAY_AS_YOU_GO"
        }
        if let priceMilliunits, let currency {
            payload.price = priceMilliunits
            payload.currency = currency
        }
        payload.transactionReason = transactionId == originalTransactionId ? .purchase : .renewal
        return payload
    }
}
