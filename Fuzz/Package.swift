// swift-tools-version: 6.0
// libFuzzer targets for the parsers that read untrusted input. Kept out of the normal build: scripts/fuzz.sh builds
// them in debug (so they may use the library's internal decoders through @testable import) with
// -sanitize=fuzzer,address and runs them over the seed corpora in Fuzz/Corpus.
import PackageDescription

let fuzzTarget: (String) -> Target = { name in
    .executableTarget(
        name: name,
        dependencies: [
            "FuzzSupport",
            .product(name: "ManagedDocument", package: "main"),
            .product(name: "GRDB", package: "GRDB.swift"),
            .product(name: "SystemPackage", package: "swift-system"),
        ],
        path: "Sources/\(name)",
        swiftSettings: [.unsafeFlags(["-parse-as-library"])]
    )
}

let package = Package(
    name: "ManagedDocumentFuzz",
    dependencies: [
        .package(name: "main", path: ".."),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-system", from: "1.8.1"),
    ],
    targets: [
        .target(name: "FuzzSupport", dependencies: [.product(name: "SystemPackage", package: "swift-system")]),
    ] + ["fuzz-bundle", "fuzz-metadata", "fuzz-inflate", "fuzz-legacy", "fuzz-document", "fuzz-fleet"].map(fuzzTarget)
)
