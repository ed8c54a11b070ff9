import CountersignAppStore
import CountersignCore
import CountersignServerCore
import CountersignTesting
import Crypto
import Foundation
import HTTPTypes
import Testing

@testable import CountersignServer
@testable import CountersignStorage

/// The third security review's findings, each reproduced from the attacker's side: over real
/// HTTP against a live server, and for the imports through the real `countersign` executable
/// whose result is then read over HTTP; on both databases where storage decides.
@Suite("Security review 3: numbers from outside, imports and attributes", .serialized)
struct SecurityReviewThreeTests {
    /// The import tests' app (App Store products in Sandbox) and a deployment whose App Store
    /// root is the data directory's test-store CA, so the CA signs what Apple would.
    static func deployment(in directory: URL, apps: [AppConfiguration]) throws -> TestStoreCA {
        let ca = try TestStoreCA.loadOrCreate(for: DataDirectory(directory))
        try DeploymentConfiguration(apps: apps, appleRootCertificates: [try AppStoreImportTests.base64DER(ca.root)]).save(toDataDirectory: directory)
        return ca
    }

    static func app(_ id: String = "demo") -> AppConfiguration {
        var app = ImportTests.app()
        app.id = id
        app.bundleId = "com.example.\(id)"
        app.environments = ["Sandbox"]
        app.publicApiKeys = ["pk_\(id)_\(UUID().uuidString.prefix(8))"]
        app.secretApiKeys = ["sk_\(id)_\(UUID().uuidString.prefix(8))"]
        return app
    }

    /// `countersign import revenuecat` of `export` (written to a file named `name`) into the
    /// database at `location`, as a user runs it.
    static func importExport(
        _ export: Data, name: String = "export.csv", app: String? = nil, directory: URL, location: DatabaseLocation
    ) async throws -> CLIRunner.Result {
        let file = directory.appendingPathComponent(name)
        try export.write(to: file)
        let database =
            switch location {
            case .sqlite(let path): path
            case .postgres(let url): url
            }
        return try await CLIRunner.runInBackground(
            ["import", "revenuecat", "--data-dir", directory.path, "--database", database, "--transactions", file.path]
                + (app.map { ["--app", $0] } ?? []))
    }

    /// A live server on the data directory and database, one harness per app.
    static func serve(
        _ directory: URL, _ location: DatabaseLocation, apps: [AppConfiguration], ca: TestStoreCA,
        _ body: @Sendable @escaping ([ReceiptTests.Harness]) async throws -> Void
    ) async throws {
        var configuration = ServerConfiguration(dataDirectory: directory)
        configuration.database = location
        try await LiveServer.run(configuration) { server, client in
            try await body(apps.map { ReceiptTests.Harness(server: server, client: client, app: $0, ca: ca) })
        }
    }

    /// RevenueCat's datetime for `date`.
    static func stamp(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyy-MM-dd HH:mm:ss"
        return formatter.string(from: date)
    }

    static let header =
        "rc_original_app_user_id,product_identifier,start_time,end_time,store,is_sandbox,store_transaction_id,original_store_transaction_id,is_auto_renewable,refunded_at,entitlement_identifiers\n"

    /// A lifetime purchase row (refunded at `refunded`, if given).
    static func lifetimeRow(_ user: String, _ id: String, bought: Date, refunded: Date? = nil) -> String {
        "\(user),lifetime,\(stamp(bought)),,app_store,t,\(id),\(id),f,\(refunded.map(stamp) ?? ""),\n"
    }

    /// A promotional grant row of entitlement `pro` for life (revoked at `refunded`, if given).
    static func grantRow(_ user: String, _ id: String, granted: Date, refunded: Date? = nil) -> String {
        "\(user),rc_promo_pro_lifetime,\(stamp(granted)),,promotional,t,\(id),\(id),f,\(refunded.map(stamp) ?? ""),\n"
    }

    // MARK: Finding 1

    @Test(
        "finding 1: an imported refund is not undone by the older signed copy of the purchase; a copy signed after it is",
        arguments: TestDatabaseKind.available)
    func importedRefundOlderSignedCopy(_ kind: TestDatabaseKind) async throws {
        try await FreshDatabase.with(kind) { location, directory in
            let app = Self.app()
            let ca = try Self.deployment(in: directory, apps: [app])
            // Bought 20 hours ago (the test CA's certificates are a day old, and a copy is checked
            // as of its signing), refunded 10 hours ago; the export knows of the refund.
            let bought = Date().addingTimeInterval(-20 * 3_600).rounded
            let refunded = Date().addingTimeInterval(-10 * 3_600).rounded
            let imported = try await Self.importExport(
                Data((Self.header + Self.lifetimeRow("alice", "7001", bought: bought, refunded: refunded)).utf8), directory: directory,
                location: location)
            #expect(imported.status == 0, "\(imported.stdout)\(imported.stderr)")

            try await Self.serve(directory, location, apps: [app], ca: ca) { harnesses in
                let harness = harnesses[0]
                #expect(!ReceiptTests.isActive(try await harness.customerInfo("alice"), "pro"))

                // The transaction as Apple signed it at purchase time, no revocation in it.
                var payload = try harness.mint("lifetime", type: .nonConsumable).payload
                payload.transactionId = "7001"
                payload.originalTransactionId = "7001"
                payload.environment = .sandbox
                payload.purchaseDate = bought
                payload.signedDate = bought.addingTimeInterval(1)
                let older = try await harness.post(user: "alice", jws: try ca.sign(payload))
                #expect(older.status == 200)
                #expect(older.json["purchase_status"] as? String == "already_recorded")
                #expect(!ReceiptTests.isActive(older.json, "pro"), "the older copy brought the refunded entitlement back")
                #expect(!ReceiptTests.isActive(try await harness.customerInfo("alice"), "pro"))
                #expect(try await Self.revocation(harness, "7001") == refunded.epochMilliseconds)

                // Another copy signed before the refund changes nothing either.
                payload.signedDate = refunded.addingTimeInterval(-60)
                #expect(!ReceiptTests.isActive(try await harness.post(user: "alice", jws: try ca.sign(payload)).json, "pro"))
                #expect(try await Self.revocation(harness, "7001") == refunded.epochMilliseconds)

                // Apple's copy signed after the refund without a revocation: the refund was reversed.
                payload.signedDate = Date()
                let reversed = try await harness.post(user: "alice", jws: try ca.sign(payload))
                #expect(ReceiptTests.isActive(reversed.json, "pro"))
                #expect(try await Self.revocation(harness, "7001") == nil)
            }
        }
    }

    static func revocation(_ harness: ReceiptTests.Harness, _ transaction: String) async throws -> Int64? {
        try await harness.server.database.withConnection { sql in
            try await sql.first("SELECT revocation_date_ms FROM purchases WHERE transaction_id = \(bind: transaction)") {
                try $0.integer("revocation_date_ms")
            } ?? nil
        }
    }

    // MARK: Finding 2

    @Test("finding 2: a promotional offer timestamp of ±(2⁶³−1) is refused with 422 and the server stays up")
    func promotionalOfferTimestampOverflow() async throws {
        let key = P256.Signing.PrivateKey()
        try await ReceiptTests.withHarness(.sqlite) { app, configuration in
            try? key.pemRepresentation.write(to: configuration.dataDirectory.appendingPathComponent("iap.p8"), atomically: true, encoding: .utf8)
            app.inAppPurchaseKey = .init(keyId: "OFFERKEY1", issuerId: "57246542-96fe-1a63-e053-0824d011072a", privateKeyFile: "iap.p8")
            app.products[0].promotionalOffers = ["winback"]
        } _: { harness in
            for timestamp in ["-9223372036854775807", "-9223372036854775808", "9223372036854775807", "99999999999999999999"] {
                let body: [String: String] = [
                    "app_user_id": "mallory", "product_id": "pro_monthly", "app_account_token": UUID().uuidString.lowercased(),
                    "promotional_offer_identifier": "winback", "promotional_offer_key_identifier": "OFFERKEY1",
                    "promotional_offer_nonce": UUID().uuidString.lowercased(), "promotional_offer_timestamp": timestamp,
                    "promotional_offer_signature": "MEUCIQ==",
                ]
                let reply = try await harness.send(
                    .post, "/v1/test_store/purchases", key: harness.key, body: try JSONSerialization.data(withJSONObject: body),
                    headers: [SignatureHeader.nonce: SignedRequestParts.makeNonce().base64EncodedString()])
                #expect(reply.status == 400 || reply.status == 422, "\(timestamp): \(reply.status)")
                #expect(
                    [APIErrorCode.promotionalOfferUnavailable.rawValue, APIErrorCode.invalidField.rawValue].contains(reply.code ?? 0),
                    "\(timestamp)")
            }
            #expect(try await harness.send(.get, "/v1/health", key: nil).status == 200)
        }
    }

    @Test("the class behind 2 and 4: a developer-signed refund with price -2⁶³ is refused, not negated into a trap")
    func developerSignedPriceOverflow() async throws {
        let xcode = try SecurityReviewTests.XcodeSigner()
        var developer = SecurityReviewTests.app("developer", bundle: "com.example.developer", environments: ["Xcode"])
        developer.storeKitTestingCertificates = [xcode.base64]
        try await SecurityReviewTests.withApps(.sqlite, [developer]) { harnesses in
            let harness = harnesses[0]
            var payload = try harness.mint("lifetime", type: .nonConsumable).payload
            payload.environment = .xcode
            payload.currency = "USD"
            payload.revocationDate = Date()
            payload.revocationReason = 0
            for price in [Int64.min, -1, Int64.max] {
                payload.price = price
                payload.transactionId = "\(9_000 + price % 1_000)"
                let reply = try await harness.send(
                    .post, "/v1/receipts", key: harness.key,
                    body: try JSONSerialization.data(withJSONObject: ["app_user_id": "dev", "fetch_token": try xcode.sign(payload)]))
                #expect(reply.status == 400 && reply.code == APIErrorCode.invalidField.rawValue, "\(price): \(reply.status) \(reply.json)")
            }
            #expect(try await harness.send(.get, "/v1/health", key: nil).status == 200)
        }
    }

    // MARK: Finding 3

    @Test(
        "finding 3: only the secret key sets $appleRefundHandlingPreference, and no attribute time lies beyond the server's",
        arguments: TestDatabaseKind.available)
    func refundPreferenceNeedsSecretKey(_ kind: TestDatabaseKind) async throws {
        try await ReceiptTests.withHarness(kind) { harness in
            func setAttributes(_ json: String, key: String, user: String = "alice") async throws -> Reply {
                try await harness.send(
                    .post, "/v1/subscribers/\(user)/attributes", key: key, body: Data(json.utf8),
                    headers: [SignatureHeader.nonce: SignedRequestParts.makeNonce().base64EncodedString()])
            }
            func stored(_ user: String = "alice") async throws -> [String: SubscriberAttributeValue] {
                try await harness.server.store.attributes(app: harness.app.id, user: user)
            }
            // The public key (an app, or anyone who read it out of one) cannot choose Apple's answer,
            // for itself or for another user's id, dated so far ahead that nothing replaces it.
            let preference = #"{"attributes":{"$appleRefundHandlingPreference":{"value":"GRANT_FULL","updated_at_ms":9000000000000000000}}}"#
            for user in ["alice", "bob"] {
                let refused = try await setAttributes(preference, key: harness.key, user: user)
                #expect(refused.status == 400 && refused.code == APIErrorCode.invalidSubscriberAttributes.rawValue)
                #expect(
                    ((refused.json["attribute_errors"] as? [[String: Any]])?.first?["key_name"] as? String) == "$appleRefundHandlingPreference")
                #expect(try await stored(user)["$appleRefundHandlingPreference"] == nil)
            }
            // Nor with a purchase's attributes.
            let (jws, _) = try harness.mint("lifetime", type: .nonConsumable)
            let posted = try await harness.post(
                user: "alice", jws: jws,
                extra: [
                    "attributes": [
                        "$appleRefundHandlingPreference": ["value": "GRANT_FULL", "updated_at_ms": 5],
                        "$email": ["value": "a@example.com", "updated_at_ms": 5],
                    ]
                ])
            #expect(posted.status == 200)
            #expect(try await stored()["$appleRefundHandlingPreference"] == nil)
            #expect(try await stored()["$email"]?.value == "a@example.com")

            // The app's backend sets it with the secret key; a time ahead of the server's is the server's.
            let before = Date().epochMilliseconds
            let set = try await setAttributes(preference, key: harness.secretKey)
            #expect(set.status == 200, "\(set.json)")
            let saved = try #require(try await stored()["$appleRefundHandlingPreference"])
            #expect(saved.value == "GRANT_FULL")
            #expect(saved.updatedAtMs >= before && saved.updatedAtMs <= Date().epochMilliseconds)
            // So a later change replaces it.
            let later = Date().epochMilliseconds + 1_000
            #expect(
                try await setAttributes(
                    #"{"attributes":{"$appleRefundHandlingPreference":{"value":"DECLINE","updated_at_ms":\#(later)}}}"#, key: harness.secretKey
                ).status == 200)
            #expect(try await stored()["$appleRefundHandlingPreference"]?.value == "DECLINE")
            // The same for any attribute an app sets.
            #expect(
                try await setAttributes(#"{"attributes":{"$displayName":{"value":"A","updated_at_ms":9223372036854775807}}}"#, key: harness.key)
                    .status == 200)
            #expect(try await stored()["$displayName"].map { $0.updatedAtMs <= Date().epochMilliseconds } == true)
        }
    }

    // MARK: Finding 4

    @Test("finding 4: an end_time_ms whose Double has no Int64 is refused, on both grant paths, and the server stays up")
    func grantEndTimeOverflow() async throws {
        try await ReceiptTests.withHarness(.sqlite) { harness in
            let paths = ["/v1/admin/customers/alice/entitlements/pro/promotional", "/v1/subscribers/alice/entitlements/pro/promotional"]
            for path in paths {
                for end in ["9223372036854775296", "9223372036854775807", "253402300800000", "1e30", "-0"] {
                    let reply = try await harness.send(.post, path, key: harness.secretKey, body: Data(#"{"end_time_ms": \#(end)}"#.utf8))
                    #expect(reply.status == 400 && reply.code == APIErrorCode.invalidField.rawValue, "\(path) \(end): \(reply.status) \(reply.json)")
                }
            }
            // The latest time a request may name is taken, and read back as RevenueCat writes it.
            let latest = try await harness.send(.post, paths[0], key: harness.secretKey, body: Data(#"{"end_time_ms": 253402300799999}"#.utf8))
            #expect(latest.status == 201, "\(latest.json)")
            let entitlement = try #require(ReceiptTests.entitlement(try await harness.customerInfo("alice"), "pro"))
            #expect(entitlement["expires_date"] as? String == "9999-12-31T23:59:59Z")
            #expect(try await harness.send(.get, "/v1/health", key: nil).status == 200)
        }
    }

    // MARK: Finding 5

    /// `data` gzipped by the system's gzip(1).
    static func gzip(_ data: Data) throws -> Data {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/gzip")
        process.arguments = ["-c"]
        let input = Pipe()
        let output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        let writer = Thread {
            input.fileHandleForWriting.write(data)
            try? input.fileHandleForWriting.close()
        }
        writer.start()
        let compressed = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return compressed
    }

    @Test(
        "finding 5: every member of a concatenated gzip export is imported; bytes after the last member are refused",
        arguments: TestDatabaseKind.available)
    func gzipMembers(_ kind: TestDatabaseKind) async throws {
        try await FreshDatabase.with(kind) { location, directory in
            let app = Self.app()
            let ca = try Self.deployment(in: directory, apps: [app])
            let bought = Date().addingTimeInterval(-3_600).rounded
            // `gzip part1 > export.gz; gzip part2 >> export.gz`: the second member holds other customers.
            var first = Self.header
            var second = ""
            for index in 0..<50 { first += Self.lifetimeRow("first-\(index)", "81\(index)", bought: bought) }
            for index in 0..<50 { second += Self.lifetimeRow("second-\(index)", "82\(index)", bought: bought) }
            let concatenated = try Self.gzip(Data(first.utf8)) + Self.gzip(Data(second.utf8))

            // With something after the last member: refused, nothing written.
            let trailing = try await Self.importExport(
                concatenated + Data("garbage".utf8), name: "bad.csv.gz", directory: directory, location: location)
            #expect(trailing.status != 0 && trailing.status != 3)
            #expect(trailing.stderr.contains("not another gzip member"), "\(trailing.stderr)")

            let imported = try await Self.importExport(concatenated, name: "export.csv.gz", directory: directory, location: location)
            #expect(imported.status == 0, "\(imported.stdout)\(imported.stderr)")
            #expect(imported.stdout.contains("customers: 100"), "\(imported.stdout)")
            try await Self.serve(directory, location, apps: [app], ca: ca) { harnesses in
                for user in ["first-0", "first-49", "second-0", "second-49"] {
                    let info = try await harnesses[0].customerInfo(user)
                    #expect(ReceiptTests.isActive(info, "pro"), "\(user)")
                }
            }
        }
    }

    // MARK: Finding 6

    @Test(
        "finding 6: one app's import of a grant id leaves another app's grant of the same id alone; a grant another customer holds is refused by line",
        arguments: TestDatabaseKind.available)
    func grantsKeyedByApp(_ kind: TestDatabaseKind) async throws {
        try await FreshDatabase.with(kind) { location, directory in
            let (a1, b1) = (Self.app("a1"), Self.app("b1"))
            let ca = try Self.deployment(in: directory, apps: [a1, b1])
            let granted = Date().addingTimeInterval(-3_600).rounded
            let alice = try await Self.importExport(
                Data((Self.header + Self.grantRow("alice", "promo-1", granted: granted)).utf8), app: "a1", directory: directory, location: location)
            #expect(alice.status == 0, "\(alice.stdout)\(alice.stderr)")
            let mallory = try await Self.importExport(
                Data((Self.header + Self.grantRow("mallory", "promo-1", granted: granted, refunded: Date().addingTimeInterval(-60))).utf8),
                app: "b1", directory: directory, location: location)
            #expect(mallory.status == 0, "\(mallory.stdout)\(mallory.stderr)")
            #expect(mallory.stdout.contains("promotional grants: 1"), "\(mallory.stdout)")
            // The same grant id in a1 for another customer: refused by its line, counted nowhere.
            let thief = try await Self.importExport(
                Data((Self.header + Self.grantRow("mallory", "promo-1", granted: granted, refunded: Date().addingTimeInterval(-60))).utf8),
                app: "a1", directory: directory, location: location)
            #expect(thief.status == 3, "\(thief.stdout)\(thief.stderr)")
            #expect(thief.stdout.contains("line 2: refused: promotional grant promo-1 of 'pro' belongs to another customer"), "\(thief.stdout)")
            #expect(thief.stdout.contains("promotional grants: 0"), "\(thief.stdout)")

            try await Self.serve(directory, location, apps: [a1, b1], ca: ca) { harnesses in
                #expect(ReceiptTests.isActive(try await harnesses[0].customerInfo("alice"), "pro"), "a1's alice lost her grant")
                #expect(!ReceiptTests.isActive(try await harnesses[0].customerInfo("mallory"), "pro"))
                #expect(!ReceiptTests.isActive(try await harnesses[1].customerInfo("mallory"), "pro"))
                let grants = try await harnesses[0].server.database.withConnection { sql in
                    try await sql.all("SELECT app_id FROM promotional_grants WHERE grant_id = 'revenuecat:promo-1:pro' ORDER BY app_id") {
                        try $0.string("app_id")
                    }
                }
                #expect(grants == ["a1", "b1"], "each app holds its own grant promo-1")
            }
        }
    }

    // MARK: Finding 7

    @Test(
        "finding 7: the import refuses by line the ids the API refuses, and a date with 19 digits of fraction", arguments: TestDatabaseKind.available)
    func importIdRules(_ kind: TestDatabaseKind) async throws {
        try await FreshDatabase.with(kind) { location, directory in
            let app = Self.app()
            let ca = try Self.deployment(in: directory, apps: [app])
            let bought = Date().addingTimeInterval(-3_600).rounded
            var csv = Self.header
            csv += Self.lifetimeRow("$RCevil", "9101", bought: bought)  // line 2
            csv += Self.lifetimeRow("$CSDeleted", "9102", bought: bought)  // line 3
            csv += Self.lifetimeRow("tab\tuser", "9103", bought: bought)  // line 4
            csv += Self.lifetimeRow("nul\u{0}user", "9104", bought: bought)  // line 5
            csv += "fraction,lifetime,\(Self.stamp(bought)).9999999999999999999,,app_store,t,9105,9105,f,,\n"  // line 6
            csv += Self.lifetimeRow("$RCAnonymousID:0123456789abcdef0123456789abcdef", "9106", bought: bought)  // line 7
            csv += Self.lifetimeRow("nul", "9107", bought: bought)  // line 8
            let imported = try await Self.importExport(Data(csv.utf8), directory: directory, location: location)
            #expect(imported.status == 3, "\(imported.stdout)\(imported.stderr)")
            for line in 2...6 { #expect(imported.stdout.contains("line \(line): refused"), "line \(line): \(imported.stdout)") }
            #expect(imported.stdout.contains("reserved") && imported.stdout.contains("control characters"), "\(imported.stdout)")
            #expect(!imported.stdout.contains("line 7:") && !imported.stdout.contains("line 8:"), "\(imported.stdout)")
            try await Self.serve(directory, location, apps: [app], ca: ca) { harnesses in
                let harness = harnesses[0]
                // Only nul's own purchase is nul's: the NUL row landed on nobody.
                let nul = try await harness.customerInfo("nul")
                #expect(ReceiptTests.isActive(nul, "pro"))
                let purchases = (nul["subscriber"] as? [String: Any])?["non_subscriptions"] as? [String: [[String: Any]]]
                #expect(purchases?["lifetime"]?.count == 1)
                #expect(ReceiptTests.isActive(try await harness.customerInfo("$RCAnonymousID:0123456789abcdef0123456789abcdef"), "pro"))
                #expect(try await harness.server.store.purchaseCount(app: app.id, transactionId: "9104") == 0)
            }
        }
    }

    @Test("finding 7: a gzip bomb is refused while it inflates, within bounded memory")
    func gzipBomb() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bomb-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        _ = try Self.deployment(in: directory, apps: [Self.app()])
        // 512 MB of one header and zeros, about 0.5 MB gzipped.
        let bomb = directory.appendingPathComponent("bomb.csv.gz")
        let make = Process()
        make.executableURL = URL(fileURLWithPath: "/bin/sh")
        make.arguments = ["-c", "{ printf '\(Self.header.dropLast())\\n'; head -c 536870912 /dev/zero; } | gzip -1 > '\(bomb.path)'"]
        try make.run()
        make.waitUntilExit()
        #expect(make.terminationStatus == 0)
        // The import runs under Python only to read its peak memory (ru_maxrss of the child).
        let script = """
            import resource, subprocess, sys
            run = subprocess.run(sys.argv[1:], capture_output=True, text=True)
            print(run.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
            print(run.stderr)
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = [
            "python3", "-c", script, CLIRunner.executable.path, "import", "revenuecat", "--data-dir", directory.path, "--transactions", bomb.path,
        ]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        let first = text.split(separator: "\n").first.map { $0.split(separator: " ") } ?? []
        let (status, megabytes) = (Int(first.first ?? "") ?? -1, Int(first.last ?? "") ?? .max)
        #expect(status == 2, "\(text)")
        #expect(text.contains("gzip bomb"), "\(text)")
        // Inflating all of it took 2 GB; the bound stops it at 100 times the file.
        #expect(megabytes < 400, "peak memory \(megabytes) MB")
    }
}

extension Date {
    /// Whole seconds, as RevenueCat's export writes times.
    fileprivate var rounded: Date { Date(timeIntervalSince1970: timeIntervalSince1970.rounded(.down)) }
}
