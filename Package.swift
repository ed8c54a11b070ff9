// swift-tools-version: 6.1
import PackageDescription

let package = Package(
    name: "Countersign",
    platforms: [.macOS(.v14), .iOS(.v17), .tvOS(.v17), .watchOS(.v10)],
    products: [
        .library(name: "Countersign", targets: ["Countersign"]),
        .library(name: "CountersignCore", targets: ["CountersignCore"]),
        .library(name: "CountersignServerCore", targets: ["CountersignServerCore"]),
        .library(name: "CountersignAppStore", targets: ["CountersignAppStore"]),
        .library(name: "CountersignAppStoreServerAPI", targets: ["CountersignAppStoreServerAPI"]),
        .library(name: "CountersignImportFormats", targets: ["CountersignImportFormats"]),
        .executable(name: "countersign", targets: ["CountersignCLI"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-crypto.git", exact: "4.5.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.8.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/hummingbird-project/swift-mustache.git", from: "2.1.1"),
    ],
    targets: [
        // What the SDK and the server share: the wire format, signing and verification.
        .target(
            name: "CountersignCore",
            dependencies: [.product(name: "Crypto", package: "swift-crypto")]
        ),
        // The server side's common ground, which the SDK does not link: an app's configuration,
        // the entitlement rules, root keys and key files, token issuance, the answer writer and
        // captured traffic.
        .target(
            name: "CountersignServerCore",
            dependencies: ["CountersignCore", .product(name: "Crypto", package: "swift-crypto")]
        ),
        .target(
            name: "CountersignAppStore",
            dependencies: [
                "CountersignCore",
                "CountersignServerCore",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ]
        ),
        .target(
            name: "CountersignAppStoreServerAPI",
            dependencies: [
                "CountersignAppStore",
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        // The purchase ledger: verified facts in, decisions out (who owns a purchase, what a change
        // writes, which webhook events it makes). No SQL, no I/O, no clock: the callers pass the
        // time, and its tests need no database.
        .target(
            name: "CountersignLedger",
            dependencies: ["CountersignCore", "CountersignServerCore", "CountersignAppStore", .product(name: "Crypto", package: "swift-crypto")]
        ),
        // Revenue charts: stored records in, RevenueCat's chart definitions out. No SQL, no I/O,
        // no clock (the caller passes now), so every definition is tested from records alone.
        .target(name: "CountersignCharts"),
        // Storage: the operations the server's routes and services call, on SQLite or PostgreSQL.
        .target(
            name: "CountersignStorage",
            dependencies: [
                "CountersignCore",
                "CountersignServerCore",
                "CountersignLedger",
                "CountersignCharts",
                "CountersignAppStore",
                "CSQLite",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // The system's zlib, for gzipped RevenueCat exports (`countersign import revenuecat`).
        .systemLibrary(name: "CZlib", providers: [.apt(["zlib1g-dev"])]),
        // The system's SQLite, with the two settings only a C caller can make (`static inline`
        // in its header): the embedded database's one dependency.
        .systemLibrary(name: "CSQLite", providers: [.apt(["libsqlite3-dev"]), .brew(["sqlite"])]),
        // Other systems' export files read into rows (RevenueCat's CSV, gzipped or not): no I/O
        // beyond the bytes given, so the fuzz targets (Fuzz/) take it alone.
        .target(name: "CountersignImportFormats", dependencies: ["CZlib", "CountersignCore", "CountersignServerCore", "CountersignAppStore"]),
        .target(
            name: "CountersignServer",
            dependencies: [
                "CountersignImportFormats",
                "CountersignLedger",
                "CountersignCharts",
                "CountersignCore",
                "CountersignServerCore",
                "CountersignAppStore",
                "CountersignAppStoreServerAPI",
                "CountersignStorage",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Mustache", package: "swift-mustache"),
            ],
            // The dashboard's templates and stylesheet (found at run time by DashboardResources).
            resources: [.copy("Dashboard/Resources")]
        ),
        // The client SDK: our own modules and Foundation only.
        .target(
            name: "Countersign",
            dependencies: ["CountersignCore"]
        ),
        // The tampering proxy: the attacker's side, for `countersign proxy`, the demo and tests.
        .target(
            name: "CountersignProxy",
            dependencies: [
                "CountersignCore",
                "CountersignServerCore",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        .executableTarget(
            name: "CountersignCLI",
            dependencies: [
                "CountersignCore",
                "CountersignServerCore",
                "CountersignAppStore",
                "CountersignServer",
                "CountersignStorage",
                "CountersignLedger",
                "CountersignProxy",
                "CountersignImportFormats",
                "Countersign",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // A sample app written as RevenueCat's documentation writes one (scripts/sample-app.sh runs it).
        .executableTarget(
            name: "countersign-sample",
            dependencies: ["Countersign"],
            path: "Examples/SampleApp"
        ),
        .target(
            name: "CountersignTesting",
            dependencies: [
                "CountersignCore",
                "CountersignServerCore",
                "CountersignAppStore",
                "CountersignAppStoreServerAPI",
                "CountersignServer",
                "CountersignStorage",
                "CountersignLedger",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "JWTKit", package: "jwt-kit"),
            ]
        ),
        // The ledger's rules case by case: links no storage and opens no database.
        .testTarget(
            name: "CountersignLedgerTests",
            dependencies: ["CountersignLedger", "CountersignCore", "CountersignServerCore", "CountersignAppStore"]
        ),
        .testTarget(name: "CountersignChartsTests", dependencies: ["CountersignCharts"]),
        .testTarget(
            name: "CountersignServerCoreTests",
            dependencies: ["CountersignCore", "CountersignServerCore", "CountersignTesting", .product(name: "Crypto", package: "swift-crypto")]
        ),
        .testTarget(
            name: "CountersignCoreTests",
            dependencies: ["CountersignCore", "CountersignServerCore", "CountersignTesting"]
        ),
        .testTarget(
            name: "CountersignAppStoreTests",
            dependencies: [
                "CountersignAppStore",
                "CountersignTesting",
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        .testTarget(
            name: "CountersignAppStoreServerAPITests",
            dependencies: [
                "CountersignAppStoreServerAPI",
                "CountersignTesting",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
            ]
        ),
        .testTarget(
            name: "CountersignServerTests",
            dependencies: [
                "CountersignServer",
                "CountersignImportFormats",
                "CountersignStorage",
                "CountersignLedger",
                "Countersign",
                "CountersignTesting",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
            ]
        ),
        .testTarget(
            name: "CountersignTests",
            dependencies: [
                "Countersign",
                "CountersignServer",
                "CountersignStorage",
                "CountersignLedger",
                "CountersignProxy",
                "CountersignTesting",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
            ]
        ),
        .testTarget(
            name: "CountersignCLITests",
            dependencies: ["CountersignCore", "CountersignServerCore", "CountersignTesting", "CountersignCLI"]
        ),
    ],
    swiftLanguageModes: [.v6]
)
