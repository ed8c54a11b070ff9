// swift-tools-version: 6.1
import PackageDescription

let package = Package(
    name: "Countersign",
    platforms: [.macOS(.v14), .iOS(.v17), .tvOS(.v17), .watchOS(.v10)],
    products: [
        .library(name: "CountersignCore", targets: ["CountersignCore"]),
        .executable(name: "countersign", targets: ["CountersignCLI"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-crypto.git", exact: "4.5.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
    ],
    targets: [
        .target(
            name: "CountersignCore",
            dependencies: [.product(name: "Crypto", package: "swift-crypto")]
        ),
        .executableTarget(
            name: "CountersignCLI",
            dependencies: [
                "CountersignCore",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .target(
            name: "CountersignTesting",
            dependencies: ["CountersignCore"]
        ),
        .testTarget(
            name: "CountersignCoreTests",
            dependencies: ["CountersignCore", "CountersignTesting"]
        ),
        .testTarget(
            name: "CountersignCLITests",
            dependencies: ["CountersignCore", "CountersignTesting", "CountersignCLI"]
        ),
    ],
    swiftLanguageModes: [.v6]
)
