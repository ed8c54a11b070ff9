import ArgumentParser
import CountersignCore
import CountersignImportFormats
import CountersignServer
import CountersignServerCore
import CountersignStorage
import Foundation
import Logging

struct ImportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Bring customers and their purchases from another system (docs/migration.md).",
        subcommands: [RevenueCat.self, AppStore.self]
    )

    /// Where to import into (the server's own storage options) and for which app.
    struct Target: ParsableArguments {
        @OptionGroup var storage: StorageOptions

        @Option(help: "The app id in the configuration (default: the only app; required when there are several).")
        var app: String?

        /// The app `--app` names, or the only one.
        func chooseApp(from apps: [AppConfiguration]) throws(CLIError) -> AppConfiguration {
            guard let chosen = app.map({ id in apps.first { $0.id == id } }) ?? (apps.count == 1 ? apps.first : nil) else {
                throw CLIError(app.map { "no app '\($0)' in the configuration" } ?? "the configuration has \(apps.count) apps: name one with --app")
            }
            return chosen
        }

        func open() async throws -> (app: AppConfiguration, database: Database) {
            let configuration = try storage.serverConfiguration()
            let directory = configuration.dataDirectory
            let deployment = try CLIError.wrapping("configuration") {
                if let file = configuration.configurationFile { return try DeploymentConfiguration.load(from: file) }
                guard let found = try DeploymentConfiguration.load(fromDataDirectory: directory) else {
                    throw CLIError("no countersign.json in \(storage.dataDir): run `countersign serve` once, or pass --config")
                }
                return found
            }
            let chosen = try chooseApp(from: deployment.apps)
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let opened = try await Database.open(
                configuration.database ?? .embedded(in: directory), logger: Logger(label: "countersign.import"),
                postgresConnections: configuration.databaseConnections, now: Date())
            return (chosen, opened)
        }
    }

    struct RevenueCat: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "revenuecat",
            abstract: "Import RevenueCat's transactions export (CSV or gzipped CSV).",
            discussion: """
                Columns are read by header name, in any order; unknown ones are ignored. Rows for \
                another store, an unknown product, an environment the app does not accept, or with a \
                malformed value are refused by line and change nothing; the rest are recorded as \
                imported, granting what the app's configuration says. Running the same file again \
                changes nothing; a later export updates the rows it carries again. Exit code 0 when \
                every row was taken, 3 when some were refused.
                """
        )

        @OptionGroup var target: Target

        @Option(help: "The export file (RevenueCat's transactions feed, .csv or .csv.gz).")
        var transactions: String

        @Flag(name: .customLong("dry-run"), help: "Check the file and count what would change; write nothing.")
        var dryRun = false

        @Flag(
            name: .customLong("deliver-events"), help: "Deliver the events the import makes to the app's webhooks (stored, not delivered, otherwise)."
        )
        var deliverEvents = false

        func run() async throws {
            let data = try CLIError.wrapping(transactions) { try Data(contentsOf: URL(fileURLWithPath: transactions)) }
            let (app, database) = try await target.open()
            var options = RevenueCatImport.Options()
            options.dryRun = dryRun
            options.deliversEvents = deliverEvents
            // Each customer in flight holds a connection while it writes.
            options.concurrency = target.storage.databaseConnections
            let progress = ImportProgress(label: dryRun ? "checking" : "importing")
            let report: RevenueCatImport.Report
            do {
                report = try await RevenueCatImport(app: app, store: CustomerDatabase(database: database), options: options).run(
                    data, now: Date(), progress: progress.update)
                progress.finish()
            } catch {
                progress.finish()
                try? await database.close()
                throw CLIError("\(transactions): \(error)")
            }
            try await database.close()
            for note in report.refused { print("line \(note.line): refused: \(note.message)") }
            for note in report.entitlementMismatches { print("line \(note.line): \(note.message)") }
            for note in report.ownership { print("line \(note.line): \(note.message)") }
            let verb = dryRun ? "would be" : "were"
            print(
                """
                \(dryRun ? "dry run: nothing was written" : "imported into app '\(app.id)'")
                rows: \(report.rows)
                customers: \(report.customers)
                purchases: \(report.newPurchases) new, \(report.knownPurchases) already stored (\(verb) kept, or updated by a later copy)
                promotional grants: \(report.grants)
                """)
            if !dryRun {
                for failure in report.stripeUnconfirmed { print("stripe: not confirmed: \(failure)") }
                if report.stripeConfirmed + report.stripeUnconfirmed.count > 0 {
                    print("stripe subscriptions: \(report.stripeConfirmed) confirmed from Stripe's API, \(report.stripeUnconfirmed.count) not")
                }
                print("active entitlements: \(report.activeEntitlements) (\(report.customersWithEntitlements) customers)")
            }
            print(
                "refused rows: \(report.refused.count); entitlement mismatches: \(report.entitlementMismatches.count); chains met another owner: \(report.ownership.count)"
            )
            if !report.refused.isEmpty { throw ExitCode(3) }
        }
    }
}

extension ImportCommand {
    struct AppStore: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "appstore",
            abstract: "Replace imported records with the App Store's signed transactions (Get Transaction History).",
            discussion: """
                Asks the App Store Server API (with the app's inAppPurchaseKey) for the signed history \
                of every purchase chain holding imported records, and of the chains named in --chains \
                (lines 'original_transaction_id,app_user_id'). Each signed transaction replaces the \
                imported record of the same id. Safe to stop at any point and run again: it goes on \
                with the chains not yet done. Exit code 0 when every chain was done, 3 otherwise.
                """
        )

        @OptionGroup var target: Target

        @Option(help: "Offline key mode: the intermediates directory, as for serve.")
        var intermediates: String?

        @Option(help: "A file of chains to import as well: 'original_transaction_id,app_user_id' a line.")
        var chains: String?

        @Flag(
            name: .customLong("deliver-events"), help: "Deliver the events the import makes to the app's webhooks (stored, not delivered, otherwise)."
        )
        var deliverEvents = false

        func run() async throws {
            var options = AppStoreImport.Options()
            options.deliversEvents = deliverEvents
            if let chains {
                // The exports' reader: a quoted id holding a comma is one field here as there.
                options.chains = try CLIError.wrapping(chains) {
                    try DelimitedText.chains(try Data(contentsOf: URL(fileURLWithPath: chains))).map { ($0.originalTransactionId, $0.appUserId) }
                }
            }
            var configuration = try target.storage.serverConfiguration()
            configuration.intermediatesDirectory = intermediates.map { URL(fileURLWithPath: $0) }
            var logger = Logger(label: "countersign.import")
            logger.logLevel = .error
            let server = try await CountersignServer(configuration: configuration, logger: logger)
            let app: AppConfiguration
            do {
                app = try target.chooseApp(from: server.deployment.apps)
            } catch {
                try? await server.database.close()
                throw error
            }
            let progress = ImportProgress(label: "asking the App Store", unit: "chains")
            let report: AppStoreImport.Report
            do {
                report = try await AppStoreImport(app: app, server: server, options: options).run(progress: progress.update)
                progress.finish()
            } catch {
                progress.finish()
                try? await server.database.close()
                throw CLIError("\(error)")
            }
            try await server.database.close()
            for failure in report.failures { print("failed: \(failure)") }
            for note in report.ownership { print(note) }
            print(
                """
                chains: \(report.chains)
                signed transactions: \(report.confirmed) replaced imported records, \(report.added) added, \(report.unchanged) already signed
                imported records not in the App Store's history: \(report.notInStoreHistory)
                chains failed (asked again next run): \(report.failures.count)
                """)
            if !report.failures.isEmpty { throw ExitCode(3) }
        }
    }
}

/// Progress on standard error: a bar redrawn in place on a terminal, a plain line every ten per
/// cent (and at the end) otherwise.
final class ImportProgress: @unchecked Sendable {
    private struct State {
        var done = 0
        var total = 0
        var lastTenth = -1
        var lastDraw = Date.distantPast
    }

    private let label: String
    private let unit: String
    private let start = Date()
    private let terminal = isatty(STDERR_FILENO) == 1
    /// Guarded by `lock`.
    private var state = State()
    private let lock = NSLock()

    init(label: String, unit: String = "rows") {
        self.label = label
        self.unit = unit
    }

    func update(_ done: Int, _ total: Int) {
        let line: String? = lock.withLock {
            state.done = done
            state.total = total
            let now = Date()
            if terminal {
                guard done == total || now.timeIntervalSince(state.lastDraw) >= 0.1 else { return nil }
                state.lastDraw = now
                return "\r" + render(done, total, now: now)
            }
            let tenth = total == 0 ? 10 : done * 10 / total
            guard tenth != state.lastTenth else { return nil }
            state.lastTenth = tenth
            return render(done, total, now: now) + "\n"
        }
        if let line { FileHandle.standardError.write(Data(line.utf8)) }
    }

    func finish() {
        if terminal { FileHandle.standardError.write(Data("\n".utf8)) }
    }

    private func render(_ done: Int, _ total: Int, now: Date) -> String {
        let elapsed = now.timeIntervalSince(start)
        let fraction = total == 0 ? 1 : Double(done) / Double(total)
        let rate = elapsed > 0 ? Double(done) / elapsed : 0
        let left = rate > 0 ? Double(total - done) / rate : 0
        let width = 30
        let filled = Int(fraction * Double(width))
        let bar = terminal ? "[" + String(repeating: "#", count: filled) + String(repeating: " ", count: width - filled) + "] " : ""
        return "\(label) \(bar)\(Int(fraction * 100))% \(done)/\(total) \(unit), \(Int(rate))/s, about \(Int(left.rounded(.up))) s left"
    }
}
