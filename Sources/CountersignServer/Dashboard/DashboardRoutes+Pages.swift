import CountersignCore
import CountersignServerCore
import CountersignStorage
import Foundation
import HTTPTypes
import Hummingbird

/// The dashboard's pages: what each reads and renders (docs/dashboard.md, "What each page reads").
extension DashboardRoutes {
    func overviewPage(_ signedIn: SignedIn) async throws -> Response {
        let date = now()
        let app = signedIn.app
        let figures = try await overview.figures(app: app.id, now: date, maximumAge: settings.overviewCacheSeconds, wait: settings.overviewFirstWait)
        {
            OverviewCache.Figures(
                active: try await store.activeCustomers(app: app, now: date),
                activity: try await store.dailyActivity(app: app.id, days: 30, now: date), computed: date)
        }
        let today = date.epochMilliseconds / 86_400_000
        let days = (0..<30).map { today - 29 + Int64($0) }
        func label(_ day: Int64) -> String { CustomerDatabase.day(Date(timeIntervalSince1970: TimeInterval(day) * 86_400)) }
        func chart(_ figures: OverviewCache.Figures, _ title: String, _ style: String, _ value: (CustomerDatabase.DailyActivity) -> Int) -> [String:
            Any]
        {
            let values = days.map { (label($0), value(figures.activity[$0] ?? .init())) }
            return [
                "title": title, "total": values.reduce(0) { $0 + $1.1 },
                "svg": SVGChart.bars(values, title: "\(title) per day, last 30 days", style: style),
            ]
        }
        let failures = try await store.verificationFailures(app: app.id, days: 30, now: date)
        // Per reason, the counts of each day (both modes together).
        var byReason: [String: [String: Int]] = [:]
        for entry in failures { byReason[entry.reason, default: [:]][entry.day, default: 0] += Int(entry.count) }
        let reasonCharts: [[String: Any]] = byReason.keys.sorted().map { reason in
            let perDay = byReason[reason] ?? [:]
            let values = days.map { day in (label(day), perDay[label(day)] ?? 0) }
            return [
                "reason": reason, "total": perDay.values.reduce(0, +),
                "svg": SVGChart.bars(values, title: "\(reason) per day, last 30 days", style: "failure"),
            ]
        }
        var values: [String: Any] = [
            "failureTotal": failures.reduce(0) { $0 + Int($1.count) }, "reasonCharts": reasonCharts, "key": keySummary(),
        ]
        if let figures {
            values["counted"] =
                [
                    "active": figures.active.map { ["entitlement": $0.entitlement, "customers": $0.customers] },
                    "hasActive": !figures.active.isEmpty,
                    "charts": [
                        chart(figures, "Purchases", "purchases", \.purchases), chart(figures, "Renewals", "renewals", \.renewals),
                        chart(figures, "Refunds", "refunds", \.refunds), chart(figures, "Expirations", "expirations", \.expirations),
                    ],
                    "time": Self.time(figures.computed),
                ] as [String: Any]
        }
        return try render("overview", signedIn, title: "Overview", section: "overview", values)
    }

    func keySummary() -> [String: Any] {
        let days = keys.daysUntilExpiry
        return [
            "daysLeft": String(format: "%.1f", days), "expires": Self.time(keys.currentSigner.key.certificate.expirationDate),
            "warning": days < 7,
        ]
    }

    func customersPage(_ signedIn: SignedIn, query: String, deleted: Bool) async throws -> Response {
        let trimmed = query.trimmingCharacters(in: .whitespaces)
        var values: [String: Any] = ["query": trimmed, "searched": !trimmed.isEmpty, "deleted": deleted]
        if !trimmed.isEmpty {
            guard trimmed.unicodeScalars.count <= 256 else { throw APIError(.invalidField, "search for at most 256 characters") }
            let found = try await store.searchCustomers(app: signedIn.app.id, query: trimmed)
            values["results"] = found.map { ["user": $0.appUserId, "path": Self.customerPath($0.appUserId), "matched": $0.matched] }
            values["none"] = found.isEmpty
            values["hasResults"] = !found.isEmpty
        }
        return try render("customers", signedIn, title: "Customers", section: "customers", values)
    }

    /// The customer page's last 50 events and webhook deliveries, as the template lists them.
    func eventRows(app: String, user: String) async throws -> (events: [[String: Any]], deliveries: [[String: Any]]) {
        let events: [[String: Any]] = try await store.events(app: app, user: user, limit: 50).map { event in
            let body = (try? JSONSerialization.jsonObject(with: Data(event.body.utf8)) as? [String: Any])?["event"] as? [String: Any] ?? [:]
            return [
                "type": event.type, "product": body["product_id"] as? String ?? "",
                "time": Self.time((body["event_timestamp_ms"] as? NSNumber)?.int64Value), "id": body["id"] as? String ?? "",
            ]
        }
        let deliveries: [[String: Any]] = try await store.deliveries(app: app, status: nil, user: user, limit: 50).map { delivery in
            [
                "type": delivery.eventType, "endpoint": delivery.endpoint, "status": delivery.status.rawValue, "attempts": delivery.attempts,
                "lastError": delivery.lastError ?? "", "created": Self.time(delivery.createdAtMs),
            ]
        }
        return (events, deliveries)
    }

    func customerPage(_ signedIn: SignedIn, user: String, done: String?) async throws -> Response {
        let date = now()
        let app = signedIn.app
        guard let (record, detail) = try await store.lookupWithEntitlements(app: app, user: user, now: date) else {
            throw AdminRoutes.unknownCustomer
        }
        let nowMs = date.epochMilliseconds
        let entitlements: [[String: Any]] = detail.entitlements.keys.sorted().map { id in
            let grant = detail.entitlements[id]!
            return [
                "id": id, "active": grant.isActive, "product": grant.productId, "why": Self.why(grant, detail: detail, now: date),
                "expires": grant.expiresDate.map { Self.time($0) } ?? "never",
            ]
        }
        let transactions: [[String: Any]] = record.transactions.reversed().map { transaction in
            [
                "id": transaction.transactionId, "original": transaction.originalTransactionId, "product": transaction.productId,
                "environment": transaction.environment, "purchased": Self.time(transaction.purchaseDateMs),
                "expires": Self.time(transaction.expiresDateMs),
                "status":
                    (transaction.revocationDateMs != nil
                    ? "refunded \(Self.time(transaction.revocationDateMs))"
                    : transaction.expiresDateMs.map { $0 <= nowMs ? "expired" : "current period" } ?? "bought")
                    + Self.importNote(transaction.importStatus),
            ]
        }
        func isOpen(_ grant: CustomerDatabase.GrantRecord) -> Bool { grant.revokedMs == nil && (grant.expiresMs.map { $0 > nowMs } ?? true) }
        let grants: [[String: Any]] = record.promotionalGrants.reversed().map { grant in
            [
                "entitlement": grant.entitlement, "starts": Self.time(grant.startsMs), "expires": grant.expiresMs.map { Self.time($0) } ?? "never",
                "state": grant.revokedMs != nil ? "revoked \(Self.time(grant.revokedMs))" : (isOpen(grant) ? "open" : "ended"),
            ]
        }
        let openGrants = Set(record.promotionalGrants.filter(isOpen).map(\.entitlement)).sorted()
        // Opened through an alias, the page is the customer's.
        let user = record.appUserId
        let (events, deliveries) = try await eventRows(app: app.id, user: user)
        let notices = ["granted": "Promotional entitlement granted.", "revoked": "Promotional entitlements revoked."]
        var values: [String: Any] = [
            "user": user, "userPath": Self.customerPath(user),
            "aliases": record.aliases.joined(separator: ", "), "hasAliases": !record.aliases.isEmpty,
            "firstSeen": record.customerInfo.subscriber.firstSeen, "lastSeen": record.customerInfo.subscriber.lastSeen,
            "entitlements": entitlements, "hasEntitlements": !entitlements.isEmpty,
            "transactions": transactions, "hasTransactions": !transactions.isEmpty,
            "grants": grants, "hasGrants": !grants.isEmpty,
            "allEntitlements": Set(app.products.flatMap(\.entitlements)).sorted().map { ["id": $0] },
            "durations": PromotionalDuration.allCases.map { ["id": $0.rawValue, "selected": $0 == .monthly] },
            "openGrants": openGrants.map { ["id": $0] }, "hasOpenGrants": !openGrants.isEmpty,
            "events": events, "hasEvents": !events.isEmpty, "deliveries": deliveries, "hasDeliveries": !deliveries.isEmpty,
        ]
        if let notice = done.flatMap({ notices[$0] }) { values["notice"] = notice }
        return try render("customer", signedIn, title: user, section: "customers", values)
    }

    /// Why the customer has (or had) an entitlement, in words.
    static func why(_ grant: EntitlementGrant, detail: CustomerEntitlements, now: Date) -> String {
        switch grant.source {
        case .promotional:
            let end = grant.expiresDate.map { grant.isActive ? "until \(Self.time($0))" : "ended \(Self.time($0))" } ?? "for life"
            return "promotional grant, \(end)"
        case .store(let environment):
            guard let expires = grant.expiresDate else { return "\(grant.productId) bought for life (\(environment))" }
            if let subscription = detail.subscriptions[grant.productId] {
                if subscription.revocationDate != nil { return "\(grant.productId) refunded (\(environment))" }
                if let grace = grant.gracePeriodExpiresDate, grace > now, expires <= now {
                    return "\(grant.productId) in a billing grace period until \(Self.time(grace)) (\(environment))"
                }
                if subscription.isInBillingRetry && !grant.isActive { return "\(grant.productId) expired in billing retry (\(environment))" }
            }
            if !grant.isActive { return "\(grant.productId) expired \(Self.time(expires)) (\(environment))" }
            return "\(grant.productId) subscription, \(grant.willRenew ? "renews" : "ends") \(Self.time(expires)) (\(environment))"
        }
    }

    func failuresPage(_ signedIn: SignedIn) async throws -> Response {
        let report = try await VerificationReport.make(app: signedIn.app, store: store, days: 30, now: now())
        let failures = report.counts
        var totals: [String: [String: Int]] = [:]
        for entry in failures { totals[entry.reason, default: [:]][entry.mode, default: 0] += Int(entry.count) }
        let reasons: [[String: Any]] = VerificationFailure.allCases.map { reason in
            [
                "reason": reason.rawValue, "meaning": reason.explanation, "category": reason.category == .tampering ? "tampering" : "cannot verify",
                "informational": totals[reason.rawValue]?["informational"] ?? 0, "enforced": totals[reason.rawValue]?["enforced"] ?? 0,
                "seen": totals[reason.rawValue] != nil,
            ]
        }
        return try render(
            "failures", signedIn, title: "Verification failures", section: "failures",
            [
                "reasons": reasons,
                "days": failures.map { entry -> [String: Any] in
                    [
                        "day": entry.day, "reason": entry.reason, "mode": entry.mode, "count": entry.count,
                        "sdkVersion": entry.sdkVersion.isEmpty ? "unknown" : entry.sdkVersion,
                        "appVersion": entry.appVersion.isEmpty ? "unknown" : entry.appVersion,
                    ]
                },
                "hasDays": !failures.isEmpty,
                "versions": report.byVersion.map { total -> [String: Any] in
                    [
                        "sdkVersion": total.sdkVersion.isEmpty ? "unknown" : total.sdkVersion,
                        "appVersion": total.appVersion.isEmpty ? "unknown" : total.appVersion, "tampering": total.tampering,
                        "cannotVerify": total.cannotVerify,
                    ]
                },
                "policy": report.policy.map { policy -> [String: Any] in
                    [
                        "mode": policy.mode, "rolloutPercent": Self.percent(policy.rolloutPercent), "minimumSDKVersion": policy.minimumSDKVersion,
                        "lifetimeHours": Self.percent(policy.lifetimeHours), "counted": policy.customersCounted, "covered": policy.customersCovered,
                        "coveredPercent": Self.percent(policy.coveredPercent),
                    ]
                } ?? [:],
                "hasPolicy": report.policy != nil,
            ])
    }

    /// `25`, `12.5`, `0.01`: a number without trailing zeros.
    static func percent(_ value: Double) -> String {
        guard value.isFinite, value.magnitude < 1e15 else { return "–" }
        return value == value.rounded()
            ? String(Int(value)) : String(format: "%.2f", value).replacingOccurrences(of: #"0+$"#, with: "", options: .regularExpression)
    }

    func keysPage(_ signedIn: SignedIn) throws -> Response {
        let date = now()
        let current = keys.currentSigner.key.certificate
        let intermediates: [[String: Any]] = keys.intermediates().map { certificate in
            [
                "publicKey": certificate.publicKey.base64EncodedString(), "expires": Self.time(certificate.expirationDate),
                "daysLeft": String(format: "%.1f", certificate.expirationDate.timeIntervalSince(date) / 86_400),
                "state": certificate == current ? "signing now" : (certificate.isValid(at: date) ? "valid, not in use" : "expired"),
                "current": certificate == current,
            ]
        }
        let mode =
            switch keys.mode {
            case .managed: "managed (the root key is in the data directory: development only)"
            case .offline: "offline (the root key is kept off this server)"
            }
        var values: [String: Any] = ["mode": mode, "intermediates": intermediates, "key": keySummary()]
        if let root = keys.managedRootPublicKey { values["root"] = root.rawRepresentation.base64EncodedString() }
        return try render("keys", signedIn, title: "Signing keys", section: "keys", values)
    }
}
