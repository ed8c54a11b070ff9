// swift-tools-version: 6.1
import PackageDescription

// Benchmarks live in their own package so the main build and tests never compile the harness.
// Run: cd Benchmarks && swift package benchmark
let package = Package(
    name: "CountersignBenchmarks",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(name: "Countersign", path: ".."),
        .package(url: "https://github.com/ordo-one/benchmark.git", from: "1.38.1", traits: ["MallocInterposer"]),
        .package(url: "https://github.com/apple/swift-crypto.git", exact: "4.5.2"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
    ],
    targets: [
        .executableTarget(
            name: "Signing",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "CountersignCore", package: "Countersign"),
                .product(name: "CountersignServerCore", package: "Countersign"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            path: "Benchmarks/Signing",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
        .executableTarget(
            name: "AppStore",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "CountersignAppStore", package: "Countersign"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            path: "Benchmarks/AppStore",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
        .executableTarget(
            name: "PairedRatios",
            dependencies: [
                .product(name: "Countersign", package: "Countersign"),
                .product(name: "CountersignCore", package: "Countersign"),
                .product(name: "CountersignServerCore", package: "Countersign"),
                .product(name: "CountersignAppStore", package: "Countersign"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            path: "Sources/PairedRatios"
        ),
        // The floor of the server benchmarks (scripts/bench-server.py): Hummingbird, a fixed
        // 1 KiB body and one Ed25519 signature per answer. Depends on neither Countersign module.
        .executableTarget(
            name: "FloorServer",
            dependencies: [
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            path: "Sources/FloorServer"
        ),
    ]
)
