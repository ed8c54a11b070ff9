// A sample app written the way RevenueCat's documentation writes one: configure, a delegate, the
// paywall from offerings, purchase a package (a cancel handled as RevenueCat's documentation
// handles it), gate a feature on an entitlement, restore. Against RevenueCat, the import differs and the configure call gains two `.with` lines
// (a self-hosted server has its own URL and root keys). See docs/migration.md.
//
// It runs against a live server with the test store (scripts/sample-app.sh starts one):
//   COUNTERSIGN_SERVER_URL, COUNTERSIGN_API_KEY, COUNTERSIGN_ROOT_KEY
// and exits non-zero when anything is not as the documentation says it should be.
import Countersign
import Foundation

/// The app's view of the customer, kept current by the delegate.
final class AppModel: PurchasesDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private var pro = false
    var isPro: Bool { lock.withLock { pro } }

    func purchases(_ purchases: Purchases, receivedUpdated customerInfo: CustomerInfo) {
        lock.withLock { pro = customerInfo.entitlements["pro"]?.isActive == true }
        print("delegate: pro is \(customerInfo.entitlements["pro"]?.isActive == true ? "active" : "inactive")")
    }
}

@main
struct SampleApp {
    static func main() async {
        let environment = ProcessInfo.processInfo.environment
        guard let server = environment["COUNTERSIGN_SERVER_URL"].flatMap(URL.init(string:)),
            let apiKey = environment["COUNTERSIGN_API_KEY"], let rootKey = environment["COUNTERSIGN_ROOT_KEY"]
        else {
            print("set COUNTERSIGN_SERVER_URL, COUNTERSIGN_API_KEY and COUNTERSIGN_ROOT_KEY")
            exit(2)
        }

        Purchases.logLevel = .info
        // RevenueCat's documented configure form; the two `.with` lines marked are Countersign's
        // own (a self-hosted server has its own URL and root key).
        Purchases.configure(
            with: Configuration.Builder(withAPIKey: apiKey)
                .with(appUserID: "sample-\(UUID().uuidString.prefix(8))")
                .with(serverURL: server)  // Countersign
                .with(rootPublicKeys: [rootKey])  // Countersign
                .with(entitlementVerificationMode: .enforced)
                .build()
        )

        let model = AppModel()
        Purchases.shared.delegate = model
        do {
            // The paywall.
            let offerings = try await Purchases.shared.offerings()
            guard let offering = offerings.current, let package = offering.monthly ?? offering.availablePackages.first else {
                fail("no current offering with a package")
            }
            print("paywall: \(offering.identifier)")
            // The paywall's copy from the offering's metadata, read without a default, as
            // RevenueCat's documentation reads it (nil: the app's own copy).
            let headline: String? = offering.getMetadataValue(for: "headline")
            print("  \(headline ?? "Go Pro")")
            for package in offering.availablePackages {
                print("  \(package.storeProduct.localizedTitle): \(package.localizedPriceString) (\(package.packageType))")
            }

            // The customer buys (a cancel in the store sheet is not an error to show).
            do {
                let (transaction, customerInfo, userCancelled) = try await Purchases.shared.purchase(package: package)
                guard !userCancelled else { fail("the purchase was cancelled") }
                guard customerInfo.entitlements["pro"]?.isActive == true else { fail("the purchase did not unlock pro") }
                print("bought \(transaction?.productIdentifier ?? "?"): pro unlocked (\(customerInfo.entitlements.verification))")
            } catch ErrorCode.purchaseCancelledError {
                fail("the purchase was cancelled")
            }

            // The entitlement gate, as any screen would check it.
            let info = try await Purchases.shared.customerInfo()
            if info.entitlements["pro"]?.isActive == true {
                print("gate: showing the pro feature")
            } else {
                fail("the gate stayed shut after a purchase")
            }

            // Restore, as the "Restore purchases" button does.
            let restored = try await Purchases.shared.restorePurchases()
            guard restored.entitlements["pro"]?.isActive == true else { fail("restore lost pro") }
            print("restored: pro still active")

            guard model.isPro else { fail("the delegate never heard of the purchase") }
            print("sample app: all steps as documented")
        } catch {
            fail("\(error)")
        }
    }

    static func fail(_ message: String) -> Never {
        print("sample app FAILED: \(message)")
        exit(1)
    }
}
