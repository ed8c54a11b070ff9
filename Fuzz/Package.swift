// swift-tools-version: 6.1
// libFuzzer targets for Countersign's parsers. Built apart from the main package because every
// module is compiled with `-sanitize=fuzzer,address`; run them with scripts/fuzz.sh.
import PackageDescription

let fuzzTargets = [
    "FuzzSignatureHeader", "FuzzCapturedHTTP", "FuzzJWS", "FuzzLegacyReceipt", "FuzzConfiguration", "FuzzRevenueCatExport", "FuzzEntitlementToken",
]

let package = Package(
    name: "CountersignFuzz",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(name: "Countersign", path: ".."),
        .package(url: "https://github.com/apple/swift-crypto.git", exact: "4.5.2"),
    ],
    targets: [
        .target(name: "FuzzDriver"),
        .target(name: "FuzzSupport", dependencies: ["FuzzDriver"], swiftSettings: [.unsafeFlags(["-parse-as-library"])]),
    ] + fuzzTargets.map { name in
        .executableTarget(
            name: name,
            dependencies: [
                "FuzzSupport",
                .product(name: "CountersignCore", package: "Countersign"),
                .product(name: "CountersignServerCore", package: "Countersign"),
                .product(name: "CountersignAppStore", package: "Countersign"),
                .product(name: "CountersignImportFormats", package: "Countersign"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: [.unsafeFlags(["-parse-as-library"])],
            linkerSettings: [.unsafeFlags(["-use-ld=lld"])]
        )
    }
)
