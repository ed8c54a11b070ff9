import CountersignCharts
import CountersignCore
import CountersignServerCore
import CountersignStorage
import CountersignTesting
import Foundation
import Hummingbird
import HummingbirdTesting
import Testing

@testable import CountersignServer

/// The lifecycle cases localstripe does not produce (a renewal, a failed payment in grace, a
/// refund in full and in part, a dispute lost), each told by Stripe's documented event payload
/// signed with the endpoint's secret, as Stripe signs it. The server reads the objects back from
/// Stripe's API, served here as Stripe's API reference shows them (what localstripe cannot put a
/// subscription into). Both databases.
@Suite("Stripe: renewals, failed payments, refunds, disputes and a lost event")
struct StripeLifecycleTests {
    static let secret = "whsec_lifecycle"
    static let day: TimeInterval = 86_400

    /// Sends `object` as the data of a `type` event, signed now with the endpoint's secret.
    static func send(
        _ harness: ReceiptTests.Harness, _ type: String, _ object: String, id: String = "evt_\(UUID().uuidString.prefix(8))",
        created: Int64 = Int64(Date().timeIntervalSince1970)
    ) async throws -> [String: Any] {
        let body = Array(
            #"{"id":"\#(id)","object":"event","type":"\#(type)","created":\#(created),"livemode":false,"data":{"object":\#(object)}}"#
                .utf8)
        let signature = StripeSignature.header(payload: body, secret: secret, timestamp: Int64(Date().timeIntervalSince1970))
        let reply = try await harness.send(
            .post, "/v1/notifications/stripe/\(harness.app.id)", key: nil, body: Data(body), headers: [StripeSignatureField.name: signature])
        #expect(reply.status == 200, "\(type): \(String(decoding: reply.body, as: UTF8.self))")
        return reply.json
    }

    static func subscriptionInfo(_ harness: ReceiptTests.Harness, _ user: String) async throws -> [String: Any] {
        let reply = try await harness.send(.get, "/v1/subscribers/\(user)", key: harness.key)
        let subscriber = reply.json["subscriber"] as? [String: Any]
        return (subscriber?["subscriptions"] as? [String: Any])?["pro_monthly"] as? [String: Any] ?? [:]
    }

    static func isActive(_ harness: ReceiptTests.Harness, _ user: String) async throws -> Bool {
        let reply = try await harness.send(.get, "/v1/subscribers/\(user)", key: harness.key)
        let entitlements = (reply.json["subscriber"] as? [String: Any])?["entitlements"] as? [String: Any]
        guard let pro = entitlements?["pro"] as? [String: Any] else { return false }
        let expires = (pro["expires_date"] as? String).flatMap(WireDate.parse)
        let grace = (pro["grace_period_expires_date"] as? String).flatMap(WireDate.parse)
        return max(expires ?? .distantFuture, grace ?? .distantPast) > Date()
    }

    @Test(
        "a renewal, a failed payment in grace, a refund in full and in part, a dispute lost, each as Stripe's signed event",
        arguments: TestDatabaseKind.available)
    func lifecycle(_ kind: TestDatabaseKind) async throws {
        try await ReceiptTests.withStripe(kind, secret: Self.secret) { harness, api in
            let now = Date()
            // Created for a period already past, then renewed: the entitlement comes back.
            await api.set(
                "/v1/subscriptions/sub_life",
                StripeAPIStandIn.subscription("sub_life", user: "ann", start: now - 40 * Self.day, end: now - 10 * Self.day))
            #expect(
                try await Self.send(harness, "customer.subscription.created", #"{"id":"sub_life","object":"subscription"}"#)["status"] as? String
                    == "applied")
            #expect(try await !Self.isActive(harness, "ann"), "the first period has ended")
            await api.set(
                "/v1/subscriptions/sub_life",
                StripeAPIStandIn.subscription(
                    "sub_life", user: "ann", start: now - 10 * Self.day, end: now + 20 * Self.day, created: now - 40 * Self.day))
            let renewal = #"{"id":"in_renew","object":"invoice","subscription":"sub_life"}"#
            #expect(try await Self.send(harness, "invoice.paid", renewal, id: "evt_renewal")["status"] as? String == "applied")
            #expect(try await Self.isActive(harness, "ann"), "invoice.paid: renewed")
            // The same event again, and an older one late: nothing goes back.
            #expect(try await Self.send(harness, "invoice.paid", renewal, id: "evt_renewal")["status"] as? String == "duplicate")
            _ = try await Self.send(harness, "customer.subscription.created", #"{"id":"sub_life","object":"subscription"}"#)
            #expect(try await Self.isActive(harness, "ann"), "a late event leaves the renewal")

            // A payment failed after the period ended: billing issue, access in grace.
            await api.set(
                "/v1/subscriptions/sub_fail",
                StripeAPIStandIn.subscription("sub_fail", user: "bea", status: "past_due", start: now - 31 * Self.day, end: now - Self.day))
            _ = try await Self.send(harness, "invoice.payment_failed", #"{"id":"in_fail","object":"invoice","subscription":"sub_fail"}"#)
            let failing = try await Self.subscriptionInfo(harness, "bea")
            #expect(failing["billing_issues_detected_at"] as? String != nil && failing["grace_period_expires_date"] as? String != nil)
            #expect(try await Self.isActive(harness, "bea"), "in grace while Stripe retries")

            // ann's first period refunded (its invoice's line names that period): the current
            // period, paid by another charge, stays.
            let firstStart = Int((now - 40 * Self.day).timeIntervalSince1970)
            await api.set(
                "/v1/invoices/in_first",
                #"{"id":"in_first","object":"invoice","subscription":"sub_life","lines":{"object":"list","data":[{"period":{"start":\#(firstStart),"end":\#(firstStart + 2_592_000)}}]}}"#
            )
            await api.set("/v1/charges/ch_first", #"{"id":"ch_first","object":"charge","amount":999,"amount_refunded":999,"invoice":"in_first"}"#)
            _ = try await Self.send(harness, "charge.refunded", #"{"id":"ch_first","object":"charge"}"#)
            #expect(try await Self.isActive(harness, "ann"), "a refund of the first period leaves the second")
            let firstPeriod = try await harness.server.store.chartTransactions(app: harness.app.id).first { $0.transactionId == "sub_life" }
            #expect(firstPeriod?.isRefunded == true)

            // ann's renewal refunded in full through its charge: access ends, refunded_at set.
            await api.set(
                "/v1/charges/ch_full",
                #"{"id":"ch_full","object":"charge","amount":999,"amount_refunded":999,"refunded":true,"invoice":"in_renew"}"#)
            await api.set("/v1/invoices/in_renew", renewal)
            _ = try await Self.send(harness, "charge.refunded", #"{"id":"ch_full","object":"charge"}"#)
            #expect(try await Self.subscriptionInfo(harness, "ann")["refunded_at"] as? String != nil)
            #expect(try await !Self.isActive(harness, "ann"), "refunded in full")
            // A later event about the subscription, which names no refund, keeps it.
            _ = try await Self.send(harness, "customer.subscription.updated", #"{"id":"sub_life","object":"subscription"}"#)
            #expect(try await !Self.isActive(harness, "ann"), "the refund stays after a later event")

            // A partial refund of cid's is Apple's prorated refund: the share kept for revenue.
            await api.set(
                "/v1/subscriptions/sub_part",
                StripeAPIStandIn.subscription("sub_part", user: "cid", start: now - 5 * Self.day, end: now + 25 * Self.day))
            await api.set("/v1/invoices/in_part", #"{"id":"in_part","object":"invoice","subscription":"sub_part"}"#)
            await api.set("/v1/charges/ch_part", #"{"id":"ch_part","object":"charge","amount":1000,"amount_refunded":400,"invoice":"in_part"}"#)
            _ = try await Self.send(harness, "charge.refunded", #"{"id":"ch_part","object":"charge"}"#)
            let stored = try await harness.server.store.chartTransactions(app: harness.app.id).first { $0.originalTransactionId == "sub_part" }
            #expect(stored?.revocationPercentage == 40_000 && stored?.environment == "StripeTest" && stored?.priceMilliunits == 9_990)

            // API versions from 2025-03-31: the charge names no invoice; its payment intent's
            // invoice payment does, and the invoice names its subscription under `parent`.
            await api.set(
                "/v1/subscriptions/sub_basil",
                StripeAPIStandIn.subscription("sub_basil", user: "eli", start: now - 3 * Self.day, end: now + 27 * Self.day))
            await api.set(
                "/v1/invoices/in_basil",
                #"{"id":"in_basil","object":"invoice","parent":{"type":"subscription_details","subscription_details":{"subscription":"sub_basil"}}}"#
            )
            await api.set("/v1/invoice_payments", #"{"object":"list","data":[{"id":"inpay_1","object":"invoice_payment","invoice":"in_basil"}]}"#)
            await api.set(
                "/v1/charges/ch_basil", #"{"id":"ch_basil","object":"charge","amount":999,"amount_refunded":999,"payment_intent":"pi_basil"}"#)
            _ = try await Self.send(harness, "customer.subscription.created", #"{"id":"sub_basil","object":"subscription"}"#)
            #expect(try await Self.isActive(harness, "eli"))
            _ = try await Self.send(harness, "charge.refunded", #"{"id":"ch_basil","object":"charge"}"#)
            #expect(try await !Self.isActive(harness, "eli"), "refunded through the payment intent's invoice")

            // bea's dispute lost: as a full refund.
            await api.set("/v1/charges/ch_disputed", #"{"id":"ch_disputed","object":"charge","amount":999,"invoice":"in_fail"}"#)
            await api.set("/v1/invoices/in_fail", #"{"id":"in_fail","object":"invoice","subscription":"sub_fail"}"#)
            _ = try await Self.send(
                harness, "charge.dispute.funds_withdrawn", #"{"id":"dp_1","object":"dispute","charge":"ch_disputed","status":"needs_response"}"#)
            #expect(try await !Self.isActive(harness, "bea"), "a dispute lost ends access")

            // Web revenue is in the charts, as store stripe: ann's two periods, bea's and cid's.
            let today = ChartDay(milliseconds: Date().epochMilliseconds)
            let from = ChartDay(daysSince1970: today.daysSince1970 - 45)
            let chart = try await harness.send(
                .get, "/v1/admin/charts/refunds?resolution=month&store=stripe&from=\(from)&to=\(today)", key: harness.secretKey)
            let points = chart.json["points"] as? [[String: Any]] ?? []
            #expect(points.reduce(0) { $0 + ($1["transactions"] as? Int ?? 0) } == 5, "\(points)")
            #expect(points.reduce(0) { $0 + ($1["refunded"] as? Int ?? 0) } == 5, "ann's two, cid's in part, eli's and bea's dispute")

            // A renewal whose event was lost: the reconciliation asks Stripe again.
            await api.set(
                "/v1/subscriptions/sub_lost",
                StripeAPIStandIn.subscription("sub_lost", user: "dee", start: now - 32 * Self.day, end: now - 2 * Self.day))
            _ = try await Self.send(harness, "customer.subscription.created", #"{"id":"sub_lost","object":"subscription"}"#)
            #expect(try await !Self.isActive(harness, "dee"))
            await api.set(
                "/v1/subscriptions/sub_lost",
                StripeAPIStandIn.subscription(
                    "sub_lost", user: "dee", start: now - 2 * Self.day, end: now + 28 * Self.day, created: now - 32 * Self.day))
            let server = harness.server
            let reconciliation = ReconciliationService(
                store: server.store, storeAPI: server.storeAPI, stripe: server.stripe, deployment: server.deployment,
                interval: .seconds(3_600), now: { Date() }, logger: server.logger)
            #expect(await reconciliation.reconcile(harness.app) >= 1)
            #expect(try await Self.isActive(harness, "dee"), "renewed by the reconciliation's re-read")

            // checkout.session.completed: the session is read back; its metadata names the app
            // user when the subscription's does not (as RevenueCat reads a session's).
            await api.set(
                "/v1/subscriptions/sub_cs", StripeAPIStandIn.subscription("sub_cs", user: nil, start: now - Self.day, end: now + 29 * Self.day))
            await api.set(
                "/v1/checkout/sessions/cs_test_1",
                #"{"id":"cs_test_1","object":"checkout.session","mode":"subscription","subscription":"sub_cs","metadata":{"app_user_id":"gus"}}"#)
            let completed = try await Self.send(harness, "checkout.session.completed", #"{"id":"cs_test_1","object":"checkout.session"}"#)
            #expect(completed["status"] as? String == "applied")
            #expect(try await Self.isActive(harness, "gus"), "granted to the session's metadata user")
            await api.set(
                "/v1/checkout/sessions/cs_test_2", #"{"id":"cs_test_2","object":"checkout.session","mode":"payment","subscription":null}"#)
            #expect(
                try await Self.send(harness, "checkout.session.completed", #"{"id":"cs_test_2","object":"checkout.session"}"#)["status"] as? String
                    == "ignored")

            // A charge of no subscription, and an object the server does not follow: ignored.
            await api.set("/v1/charges/ch_alone", #"{"id":"ch_alone","object":"charge","amount":500}"#)
            #expect(try await Self.send(harness, "charge.refunded", #"{"id":"ch_alone","object":"charge"}"#)["status"] as? String == "ignored")
            #expect(try await Self.send(harness, "customer.created", #"{"id":"cus_1","object":"customer"}"#)["status"] as? String == "ignored")
        }
    }

    @Test(
        "a plan changed within the period: the new plan from the change, prorated; the old one replaced, not refunded; a later read changes nothing",
        arguments: TestDatabaseKind.available)
    func planChange(_ kind: TestDatabaseKind) async throws {
        try await ReceiptTests.withStripe(
            kind, secret: Self.secret, products: ["price_monthly": "pro_monthly", "price_max": "max_monthly"],
            configure: { $0.products.append(AppConfiguration.Product(id: "max_monthly", type: .autoRenewable, entitlements: ["pro", "max"])) }
        ) { harness, api in
            let now = Date()
            let (start, end) = (now - 10 * Self.day, now + 20 * Self.day)
            let path = "/v1/subscriptions/sub_plan"
            await api.set(path, StripeAPIStandIn.subscription("sub_plan", user: "fay", start: start, end: end))
            _ = try await Self.send(harness, "customer.subscription.created", #"{"id":"sub_plan","object":"subscription"}"#)
            #expect(try await Self.entitlements(harness, "fay") == ["pro": "pro_monthly"])

            // Upgraded to max, 2999 cents a month, ten days into the month.
            await api.set(path, StripeAPIStandIn.subscription("sub_plan", user: "fay", start: start, end: end, price: "price_max", amount: 2999))
            let upgrade = #"{"id":"sub_plan","object":"subscription"}"#
            _ = try await Self.send(harness, "customer.subscription.updated", upgrade, id: "evt_upgrade")
            #expect(try await Self.entitlements(harness, "fay") == ["pro": "max_monthly", "max": "max_monthly"])
            // Delivered again, and read again by a later event: the same two transactions.
            #expect(try await Self.send(harness, "customer.subscription.updated", upgrade, id: "evt_upgrade")["status"] as? String == "duplicate")
            _ = try await Self.send(harness, "invoice.paid", #"{"id":"in_plan","object":"invoice","subscription":"sub_plan"}"#)
            var stored = try await harness.server.store.chartTransactions(app: harness.app.id).filter { $0.originalTransactionId == "sub_plan" }
                .sorted { $0.purchaseMs < $1.purchaseMs }
            #expect(stored.count == 2)
            let (old, new) = (stored[0], stored[stored.count - 1])
            #expect(old.transactionId == "sub_plan" && old.productId == "pro_monthly" && old.isUpgraded && !old.isRefunded)
            #expect(old.revokedMs == new.purchaseMs && new.productId == "max_monthly" && new.expiresMs == end.epochMilliseconds / 1000 * 1000)
            // What Stripe prorates: (29.99 − 9.99) for the two thirds of the month left.
            #expect(abs((new.priceMilliunits ?? 0) - 13_333) <= 20, "\(new.priceMilliunits ?? 0)")

            // Back down to pro: max goes at once; the credit is no charge and no refund.
            await api.set(path, StripeAPIStandIn.subscription("sub_plan", user: "fay", start: start, end: end))
            _ = try await Self.send(harness, "customer.subscription.updated", upgrade, id: "evt_downgrade")
            #expect(try await Self.entitlements(harness, "fay") == ["pro": "pro_monthly"])
            stored = try await harness.server.store.chartTransactions(app: harness.app.id).filter { $0.originalTransactionId == "sub_plan" }
            #expect(stored.count == 3 && stored.filter(\.isUpgraded).count == 2 && !stored.contains(where: \.isRefunded))
            #expect(stored.first { !$0.isUpgraded }?.priceMilliunits == 0)
            // RevenueCat's immediate product change: a RENEWAL of the new plan and a PRODUCT_CHANGE, each way; no CANCELLATION.
            let events = try await harness.server.store.events(app: harness.app.id, user: "fay").reversed().map(\.type)
            #expect(events == ["INITIAL_PURCHASE", "RENEWAL", "PRODUCT_CHANGE", "RENEWAL", "PRODUCT_CHANGE"])

            // Signed by whoever holds the secret, an event may say any time: the largest and the
            // smallest change the record only, and stop nothing.
            for (created, price) in [(Int64.max, "price_max"), (Int64.min, "price_monthly")] {
                await api.set(path, StripeAPIStandIn.subscription("sub_plan", user: "fay", start: start, end: end, price: price))
                _ = try await Self.send(harness, "customer.subscription.updated", upgrade, created: created)
            }
            #expect(try await Self.entitlements(harness, "fay")["pro"] != nil)
        }
    }

    /// The customer's active entitlements, each with the product that grants it.
    static func entitlements(_ harness: ReceiptTests.Harness, _ user: String) async throws -> [String: String] {
        let reply = try await harness.send(.get, "/v1/subscribers/\(user)", key: harness.key)
        let entitlements = (reply.json["subscriber"] as? [String: Any])?["entitlements"] as? [String: Any] ?? [:]
        var active: [String: String] = [:]
        for (name, value) in entitlements {
            guard let value = value as? [String: Any], let expires = (value["expires_date"] as? String).flatMap(WireDate.parse), expires > Date()
            else { continue }
            active[name] = value["product_identifier"] as? String
        }
        return active
    }
}

enum StripeSignatureField {
    static let name = NotificationRoutes.stripeSignature
}

/// Numbers from outside: Stripe's answers (a stand-in here) with the extreme integers in every
/// number the server reads of a subscription, an invoice and a charge. Each event is answered
/// (applied, ignored or refused), never a stopped server.
@Suite("Stripe: extreme numbers in Stripe's answers")
struct StripeExtremeNumberTests {
    static let extremes: [String] = ["\(Int64.min)", "-1", "0", "1", "\(Int64.max)", "253402300799", "-62135596800"]

    @Test("every number of a subscription, an invoice line and a charge at each extreme: answered, and the server still up")
    func extremeNumbers() async throws {
        try await ReceiptTests.withStripe(.sqlite, secret: StripeLifecycleTests.secret) { harness, api in
            let fields = ["current_period_start", "current_period_end", "start_date", "ended_at", "trial_end", "unit_amount"]
            var sent = 0
            for field in fields {
                for value in Self.extremes {
                    var subscription = StripeAPIStandIn.subscription(
                        "sub_x", user: "xavier", status: field == "ended_at" ? "canceled" : "active", start: Date() - 86_400,
                        end: Date() + 86_400 * 29)
                    subscription = Self.setting(field, to: value, in: subscription)
                    await api.set("/v1/subscriptions/sub_x", subscription)
                    await api.set(
                        "/v1/invoices/in_x",
                        #"{"id":"in_x","object":"invoice","subscription":"sub_x","lines":{"data":[{"period":{"start":\#(value),"end":\#(value)}}]}}"#)
                    await api.set(
                        "/v1/charges/ch_x", #"{"id":"ch_x","object":"charge","amount":\#(value),"amount_refunded":\#(value),"invoice":"in_x"}"#)
                    for (type, object) in [
                        ("customer.subscription.updated", #"{"id":"sub_x","object":"subscription"}"#),
                        ("charge.refunded", #"{"id":"ch_x","object":"charge"}"#),
                    ] {
                        let body = Array(
                            #"{"id":"evt_\#(sent)","object":"event","type":"\#(type)","created":\#(value),"data":{"object":\#(object)}}"#.utf8)
                        let signature = StripeSignature.header(
                            payload: body, secret: StripeLifecycleTests.secret, timestamp: Int64(Date().timeIntervalSince1970))
                        let reply = try await harness.send(
                            .post, "/v1/notifications/stripe/\(harness.app.id)", key: nil, body: Data(body),
                            headers: [StripeSignatureField.name: signature])
                        #expect(reply.status == 200 || reply.status == 422 || reply.status == 502, "\(field)=\(value) \(type): \(reply.status)")
                        sent += 1
                    }
                }
            }
            let health = try await harness.send(.get, "/v1/health", key: nil)
            #expect(health.status == 200 && sent == fields.count * Self.extremes.count * 2)
        }
    }

    /// `json` with the number of `field` (its first occurrence) replaced by `value`, or added.
    static func setting(_ field: String, to value: String, in json: String) -> String {
        guard let range = json.range(of: "\"\(field)\":") else {
            return json.replacingOccurrences(of: #""livemode":false"#, with: #""livemode":false,"\#(field)":\#(value)"#)
        }
        let rest = json[range.upperBound...]
        let end = rest.firstIndex(where: { $0 == "," || $0 == "}" }) ?? rest.endIndex
        return json.replacingCharacters(in: range.upperBound..<end, with: value)
    }
}
