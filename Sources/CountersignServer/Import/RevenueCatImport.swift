import CountersignAppStore
import CountersignCore
import CountersignImportFormats
import CountersignLedger
import CountersignServerCore
import CountersignStorage
import Foundation
import NIOConcurrencyHelpers

/// `countersign import revenuecat`: RevenueCat's transactions export into an app's database.
///
/// Each row is read by column name (``RevenueCatExportRow``) and checked against the app's
/// configuration; a row that cannot be taken is reported by line with its reason and writes
/// nothing. The rest goes in through the same path as a posted purchase
/// (``CustomerDatabase/record(_:app:poster:now:)``: ownership rules, transfer behaviour,
/// events), marked imported until the App Store confirms it (``AppStoreImport``).
///
/// Customers: the rows of one `rc_original_app_user_id` are one customer, known by the
/// `rc_last_seen_app_user_id_alias` of its most recently updated row (the id the app uses now),
/// with the original id as an alias, as logIn records a merged anonymous id. Each customer's rows
/// are written in purchase order, customers concurrently; the rows of a purchase chain that
/// several customers claim are written last, one by one in file order, so the app's transfer
/// behaviour decides as it would have for those posts.
///
/// Every write is idempotent: a second run of the same file changes nothing, and a later export
/// carrying a row again (a later `updated_at`) updates it, so a refund delivered later revokes.
public struct RevenueCatImport: Sendable {
    public struct Options: Sendable {
        /// Deliver the events the import makes to the app's webhooks (stored, marked imported,
        /// and not delivered otherwise).
        public var deliversEvents = false
        /// Check and count, write nothing.
        public var dryRun = false
        /// Customers written, and then read for the summary, at once.
        public var concurrency = 16

        public init() {}
    }

    /// What an import did (or, on a dry run, would do).
    public struct Report: Sendable {
        public var rows = 0
        public var customers = 0
        /// Purchases recorded for the first time, and those already stored (left, or updated by
        /// a later copy).
        public var newPurchases = 0
        public var knownPurchases = 0
        public var grants = 0
        /// Customers with an active entitlement after the import, and their entitlements.
        public var customersWithEntitlements = 0
        public var activeEntitlements = 0
        /// Rows refused, by line.
        public var refused: [Note] = []
        /// Rows whose `entitlement_identifiers` differ from what the app's configuration grants.
        public var entitlementMismatches: [Note] = []
        /// Rows that met a chain another customer owns: moved, or left with that customer.
        public var ownership: [Note] = []
        /// Stripe subscriptions read back from Stripe's API after the import, and those it could
        /// not read (each with the reason; their imported rows stay as imported).
        public var stripeConfirmed = 0
        public var stripeUnconfirmed: [String] = []

        public struct Note: Sendable, Hashable {
            public var line: Int
            public var message: String
        }
    }

    let app: AppConfiguration
    let store: CustomerDatabase
    let options: Options
    /// The app's Stripe account, which confirms imported Stripe subscriptions (nil: the app does
    /// not sell through Stripe).
    let stripe: StripeWeb?

    public init(app: AppConfiguration, store: CustomerDatabase, options: Options = Options()) {
        self.app = app
        self.store = store
        self.options = options
        stripe = app.stripe == nil ? nil : StripeWeb(deployment: DeploymentConfiguration(apps: [app]), store: store)
    }

    /// A row checked against the app: a purchase to record or a promotional grant.
    struct Planned: Sendable {
        enum Kind: Sendable {
            case purchase(VerifiedTransaction)
            case grants([String])
        }

        var row: RevenueCatExportRow
        var kind: Kind
    }

    /// Imports `data` (the export, CSV or gzipped CSV); `progress` hears (rows done, rows to do).
    public func run(_ data: Data, now: Date, progress: @escaping @Sendable (Int, Int) -> Void = { _, _ in }) async throws -> Report {
        var report = Report()
        let planned = try plan(DelimitedText(data), into: &report)
        let (customers, contested) = Self.arrange(planned)
        report.customers = customers.count
        let outcomes = try await write(customers, then: contested, total: planned.count, progress: progress)
        report.newPurchases = outcomes.new
        report.knownPurchases = outcomes.known
        report.grants = outcomes.grants
        report.ownership = outcomes.ownership.sorted { $0.line < $1.line }
        report.refused = (report.refused + outcomes.refused).sorted { $0.line < $1.line }
        if !options.dryRun {
            let subscriptions = Set(planned.filter { $0.row.store == "stripe" }.map(\.row.originalTransactionId))
            (report.stripeConfirmed, report.stripeUnconfirmed) = await confirmStripe(subscriptions, now: now)
            try await Self.forEach(customers, atOnce: options.concurrency) { customer in
                try await store.activeEntitlementIds(app: app, user: customer.user, now: now).count
            } merge: { active in
                report.activeEntitlements += active
                if active > 0 { report.customersWithEntitlements += 1 }
            }
        }
        return report
    }

    /// Runs `body` for every element, `atOnce` at a time, and hands each result to `merge` as it
    /// comes (in no set order).
    static func forEach<Element: Sendable, Result: Sendable>(
        _ elements: [Element], atOnce: Int, _ body: @escaping @Sendable (Element) async throws -> Result, merge: (Result) -> Void
    ) async throws {
        try await withThrowingTaskGroup(of: Result.self) { group in
            var pending = elements.makeIterator()
            for _ in 0..<max(1, atOnce) {
                guard let next = pending.next() else { break }
                group.addTask { try await body(next) }
            }
            while let result = try await group.next() {
                merge(result)
                if let next = pending.next() { group.addTask { try await body(next) } }
            }
        }
    }

    /// Reads every row of the file and checks it against the app; what is refused goes into
    /// `report` by line.
    private func plan(_ text: DelimitedText, into report: inout Report) throws -> [Planned] {
        let missing = RevenueCatExportRow.requiredColumns.filter { text.columns[$0] == nil }
        guard missing.isEmpty else {
            throw DelimitedText.Failure(line: 1, message: "the header lacks RevenueCat's column(s) \(missing.joined(separator: ", "))")
        }
        report.rows = text.records.count + text.malformed.count
        report.refused = text.malformed.map { Report.Note(line: $0.line, message: $0.reason) }
        var planned: [Planned] = []
        for record in text.records {
            do {
                let row = try RevenueCatExportRow(record, columns: text.columns)
                planned.append(try plan(row, mismatches: &report.entitlementMismatches))
            } catch {
                report.refused.append(Report.Note(line: record.line, message: "\(error)"))
            }
        }
        report.refused.sort { $0.line < $1.line }
        return planned
    }

    /// Writes the customers `options.concurrency` at a time, then the contested rows one by one.
    private func write(
        _ customers: [Customer], then contested: [(Customer, Planned)], total: Int, progress: @escaping @Sendable (Int, Int) -> Void
    ) async throws -> Outcome {
        let done = ImportCounter()
        progress(0, total)
        var outcomes = Outcome()
        try await Self.forEach(customers, atOnce: options.concurrency) { customer in
            let outcome = try await write(customer, rows: customer.rows)
            progress(done.add(customer.rows.count), total)
            return outcome
        } merge: {
            outcomes.merge($0)
        }
        for (customer, row) in contested {
            outcomes.merge(try await write(customer, rows: [row]))
            progress(done.add(1), total)
        }
        return outcomes
    }

    /// Checks a row against the app's configuration.
    func plan(_ row: RevenueCatExportRow, mismatches: inout [Report.Note]) throws -> Planned {
        typealias Refusal = RevenueCatExportRow.Refusal
        var row = row
        if row.store == "stripe" {
            row = try Self.stripeRow(row, app: app)
        } else if !app.environments.contains(row.environment.rawValue) {
            throw Refusal("environment \(row.environment.rawValue) is not one app '\(app.id)' accepts")
        }
        switch row.store {
        case "promotional":
            let configured = Set(app.products.flatMap(\.entitlements))
            let named = row.entitlements ?? Self.promotionalEntitlement(row.productId).map { [$0] } ?? []
            guard !named.isEmpty else { throw Refusal("a promotional grant without entitlement_identifiers") }
            if let unknown = named.first(where: { !configured.contains($0) }) {
                throw Refusal("promotional entitlement '\(unknown)' is not one app '\(app.id)' grants")
            }
            return Planned(row: row, kind: .grants(named))
        case "app_store", "stripe":
            guard let product = app.product(row.productId) else {
                throw Refusal("product '\(row.productId)' is not configured for app '\(app.id)'")
            }
            if row.isAutoRenewable != (product.type == .autoRenewable) {
                throw Refusal(
                    "product '\(row.productId)' is configured as \(product.type.rawValue), the row says is_auto_renewable \(row.isAutoRenewable)")
            }
            if product.type == .autoRenewable, row.expires == nil {
                throw Refusal("an auto-renewable subscription without end_time")
            }
            if let named = row.entitlements, Set(named) != Set(product.entitlements) {
                mismatches.append(
                    Report.Note(
                        line: row.line,
                        message:
                            "entitlement_identifiers \(named.sorted()) where the app's configuration grants \(product.entitlements.sorted()) (the configuration applies)"
                    ))
            }
            let transaction = try VerifiedTransaction(
                imported: row.transaction(app: app, kind: product.type), app: app, deliversEvents: options.deliversEvents)
            return Planned(row: row, kind: .purchase(transaction))
        case let other:
            throw Refusal("store '\(other)': only App Store and Stripe purchases and promotional grants are imported")
        }
    }

    /// The entitlement a RevenueCat promotional product id names (`rc_promo_<entitlement>_<duration>`).
    static func promotionalEntitlement(_ productId: String) -> String? {
        guard productId.hasPrefix("rc_promo_") else { return nil }
        let rest = productId.dropFirst("rc_promo_".count)
        guard let cut = rest.lastIndex(of: "_"), cut > rest.startIndex else { return nil }
        return String(rest[..<cut])
    }

    struct Customer: Sendable {
        var user: String
        /// RevenueCat's `original_app_user_id` of the customer.
        var original: String
        var aliases: [String]
        var firstSeen: Date
        var rows: [Planned]
    }

    /// The customers with their rows in purchase order, and the rows of chains several customers
    /// claim (in file order, each with its customer).
    static func arrange(_ planned: [Planned]) -> (customers: [Customer], contested: [(Customer, Planned)]) {
        var byOriginal: [String: [Planned]] = [:]
        var order: [String] = []
        for row in planned {
            if byOriginal[row.row.originalAppUserId] == nil { order.append(row.row.originalAppUserId) }
            byOriginal[row.row.originalAppUserId, default: []].append(row)
        }
        var customers: [Customer] = []
        var claims: [String: Set<String>] = [:]
        for original in order {
            let rows = byOriginal[original]!
            let (user, aliases) = Self.customerIds(original: original, rows: rows.map(\.row))
            let firstSeen = rows.map { min($0.row.firstSeen ?? $0.row.purchased, $0.row.purchased) }.min()!
            customers.append(
                Customer(
                    user: user, original: original, aliases: aliases, firstSeen: firstSeen,
                    rows: rows.sorted { ($0.row.purchased, $0.row.line) < ($1.row.purchased, $1.row.line) }))
            for row in rows where !row.row.store.isEmpty {
                claims[row.row.originalTransactionId, default: []].insert(user)
            }
        }
        var contested: [(Customer, Planned)] = []
        for index in customers.indices {
            let (kept, shared) = customers[index].rows.partitioned { row in
                if case .purchase = row.kind { return (claims[row.row.originalTransactionId]?.count ?? 0) > 1 }
                return false
            }
            customers[index].rows = kept
            contested += shared.map { (customers[index], $0) }
        }
        contested.sort { $0.1.row.line < $1.1.row.line }
        return (customers, contested)
    }

    /// The id a customer is kept under and the ids that become its aliases, by RevenueCat's rule
    /// for naming a customer (its webhooks' `app_user_id`): the last seen identified alias, else
    /// the last seen alias. Every other id the rows name (the original id, older last seen
    /// aliases) is an alias, answering as the customer.
    static func customerIds(original: String, rows: [RevenueCatExportRow]) -> (user: String, aliases: [String]) {
        let lastSeen = rows.sorted { ($0.updated, $0.line) > ($1.updated, $1.line) }.map(\.lastSeenAppUserId)
        let user = (lastSeen + [original]).first { !ReservedAppUserID.isAnonymous($0) } ?? lastSeen[0]
        var aliases: [String] = []
        for id in [original] + lastSeen.reversed() where !AppUserID.same(id, user) && !aliases.contains(where: { AppUserID.same($0, id) }) {
            aliases.append(id)
        }
        return (user, aliases)
    }

    struct Outcome: Sendable {
        var new = 0
        var known = 0
        var grants = 0
        var ownership: [Report.Note] = []
        /// Rows refused when written (a grant another customer holds).
        var refused: [Report.Note] = []

        mutating func merge(_ other: Outcome) {
            new += other.new
            known += other.known
            grants += other.grants
            ownership += other.ownership
            refused += other.refused
        }
    }

    /// Writes a customer and the given rows of theirs (on a dry run, only counts).
    func write(_ customer: Customer, rows: [Planned]) async throws -> Outcome {
        var outcome = Outcome()
        if !options.dryRun {
            try await store.importCustomer(
                app: app.id, user: customer.user, aliases: customer.aliases, firstSeen: customer.firstSeen, original: customer.original)
        }
        for planned in rows {
            let row = planned.row
            switch planned.kind {
            case .grants(let entitlements):
                guard !options.dryRun else {
                    outcome.grants += entitlements.count
                    continue
                }
                for entitlement in entitlements {
                    let grantId = "revenuecat:\(row.transactionId):\(entitlement)"
                    if try await store.importGrant(
                        app: app.id, user: customer.user, grantId: grantId, entitlement: entitlement,
                        starts: row.purchased, expires: row.expires, revoked: row.refunded)
                    {
                        outcome.grants += 1
                    } else {
                        outcome.refused.append(
                            .init(line: row.line, message: "promotional grant \(row.transactionId) of '\(entitlement)' belongs to another customer"))
                    }
                }
            case .purchase(let transaction):
                if options.dryRun {
                    if try await store.purchaseCount(app: app.id, transactionId: row.transactionId) > 0 {
                        outcome.known += 1
                    } else {
                        outcome.new += 1
                    }
                    continue
                }
                let (status, note) = try await store.recordForImport(
                    transaction, app: app, poster: customer.user, chain: row.originalTransactionId, now: row.updated)
                if status == .new { outcome.new += 1 } else if status != nil { outcome.known += 1 }
                if let note { outcome.ownership.append(.init(line: row.line, message: note)) }
            }
        }
        return outcome
    }
}

extension CustomerDatabase {
    /// Records an imported purchase for `poster` as both imports do: its status (nil when the
    /// app's transfer behaviour kept the chain with another owner) and what the report says of an
    /// owner it met (nil when it met none). A kept chain is a note, not a failure: asking again
    /// would meet the same owner.
    func recordForImport(_ transaction: VerifiedTransaction, app: AppConfiguration, poster: String, chain: String, now: Date)
        async throws -> (status: PurchaseStatus?, note: String?)
    {
        let status: PurchaseStatus
        do {
            status = try await record(transaction, app: app, poster: poster, now: now)
        } catch LedgerError.purchaseOwnedByAnotherUser(let reason) {
            return (nil, "chain \(chain) stays with its owner: \(reason)")
        }
        switch status {
        case .new, .alreadyRecorded: return (status, nil)
        case .transferred: return (status, "chain \(chain) moved to '\(poster)' (transferBehavior \(app.transferBehavior.rawValue))")
        case .boundToAnotherUser: return (status, "chain \(chain) is bound to another customer by its app account token")
        }
    }
}

/// Rows done, counted across the import's tasks.
final class ImportCounter: Sendable {
    private let value = NIOLockedValueBox(0)
    func add(_ count: Int) -> Int {
        value.withLockedValue {
            $0 += count; return $0
        }
    }
}

extension Array {
    /// The elements for which `belongsInSecond` is false, then those for which it is true, each in order.
    func partitioned(by belongsInSecond: (Element) -> Bool) -> ([Element], [Element]) {
        var first: [Element] = []
        var second: [Element] = []
        for element in self {
            if belongsInSecond(element) { second.append(element) } else { first.append(element) }
        }
        return (first, second)
    }
}
