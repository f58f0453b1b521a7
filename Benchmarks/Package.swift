// swift-tools-version: 6.0
// A separate package so that benchmarking never touches the library's own build or dependency graph.
// Build it with: swift build -c release --package-path Benchmarks   (or run scripts/bench-bundle.sh,
// scripts/bench-document.sh, scripts/bench-convert.sh)
import PackageDescription

let package = Package(
    name: "ManagedDocumentBenchmarks",
    dependencies: [
        // Named explicitly: a path dependency's identity is otherwise its folder's name, which a clone may change.
        .package(name: "ManagedDocument", path: ".."),
        .package(url: "https://github.com/apple/swift-system", from: "1.8.1"),
        // The library's own GRDB (same requirement as ../Package.swift): document-benchmark and convert-benchmark
        // write rows through it.
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        // The Swift peer in scripts/bench-bundle.sh: the zip library Swift users already know.
        .package(url: "https://github.com/weichsel/ZIPFoundation", from: "0.9.20"),
    ],
    targets: [
        .executableTarget(
            name: "bundle-benchmark",
            dependencies: [
                .product(name: "ManagedDocument", package: "ManagedDocument"),
                .product(name: "SystemPackage", package: "swift-system"),
            ]
        ),
        .executableTarget(
            name: "zipfoundation-peer",
            dependencies: [.product(name: "ZIPFoundation", package: "ZIPFoundation")]
        ),
        .target(
            name: "BenchmarkSupport",
            dependencies: [.product(name: "SystemPackage", package: "swift-system")]
        ),
        .executableTarget(
            name: "document-benchmark",
            dependencies: [
                "BenchmarkSupport",
                .product(name: "ManagedDocument", package: "ManagedDocument"),
                .product(name: "SystemPackage", package: "swift-system"),
                .product(name: "GRDB", package: "GRDB.swift"),
            ]
        ),
        .executableTarget(
            name: "convert-benchmark",
            dependencies: [
                "BenchmarkSupport",
                .product(name: "ManagedDocument", package: "ManagedDocument"),
                .product(name: "SystemPackage", package: "swift-system"),
                .product(name: "GRDB", package: "GRDB.swift"),
            ]
        ),
    ]
)
