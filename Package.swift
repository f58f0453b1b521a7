// swift-tools-version: 6.0
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

// Linux only: built and tested on Debian 12 (x86-64) with Swift 6.3.1. No Apple platform is declared because none is
// built or tested (the library's file handling is written against Glibc and Linux: O_TMPFILE, flock, /proc).
let package = Package(
    name: "ManagedDocument",
    products: [
        .library(name: "ManagedDocument", targets: ["ManagedDocument"]),
        .executable(name: "docconvert", targets: ["docconvert"]),
        // libmdzvfs.so, a loadable SQLite extension: `.load libmdzvfs`, then open `file:doc.mdz?vfs=mdz`. SQLite
        // derives the entry point (`sqlite3_mdzvfs_init`) from the file name, so the name stays.
        .library(name: "mdzvfs", type: .dynamic, targets: ["mdzvfs"]),
    ],
    dependencies: [
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
        .package(url: "https://github.com/apple/swift-system", from: "1.8.1"),
    ],
    targets: [
        .systemLibrary(
            name: "CArchive",
            pkgConfig: "libarchive",
            providers: [.apt(["libarchive-dev", "zlib1g-dev", "libisal-dev"])]
        ),
        .target(
            // The SQLite binding the core is written against (CMDZSQLite.h): SQLite's types, the `md_*` calls its VFS
            // code makes, the structures of its VFSs' files. Declarations, and the extended result codes; `calls.inc`,
            // the calls both bindings define alike, is included by each binding's file, not compiled here.
            name: "CMDZSQLite",
            exclude: ["calls.inc"]
        ),
        .target(
            // The library's definition of the binding: the SQLite the process links (GRDB's).
            name: "CMDZLinkedSQLite",
            dependencies: ["CMDZSQLite"],
            linkerSettings: [.linkedLibrary("sqlite3")]
        ),
        .target(
            // The extension's definition of the binding: every call through the routines the host passes
            // (sqlite3ext.h).
            name: "CMDZExtension",
            dependencies: ["CMDZSQLite"]
        ),
        .target(
            // The reading core, without GRDB and without the process's SQLite: support (files, locks, flushes), the
            // zip readers, the format, the SQLite header, the bundle reader with its extraction, and serving a store
            // in place through a VFS written against CMDZSQLite. The library re-exports it; the extension links it.
            name: "MDZCore",
            dependencies: [
                "CArchive",
                "CMDZSQLite",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "ManagedDocument",
            dependencies: [
                "MDZCore",
                "CArchive",
                "CMDZSQLite",
                "CMDZLinkedSQLite",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            // The `mdz` VFS: the core, bound to the host's SQLite (CMDZExtension), with the Swift runtime linked in,
            // so a host needs no toolchain.
            name: "mdzvfs",
            dependencies: [
                "MDZCore",
                "CMDZSQLite",
                "CMDZExtension",
                "CArchive",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            exclude: ["exports.map"],
            swiftSettings: swiftSettings,
            linkerSettings: [.unsafeFlags([
                // The Swift runtime and FoundationEssentials linked in (their static archives: the two below are what
                // FoundationEssentials needs and the static link does not name).
                "-static-stdlib", "-Xlinker", "-l_FoundationCollections", "-Xlinker", "-l_FoundationCShims",
                // Only the entry points exported; what no path reaches dropped.
                "-Xlinker", "--version-script=Sources/mdzvfs/exports.map", "-Xlinker", "--gc-sections",
            ])]
        ),
        .target(
            name: "LegacySamples",
            dependencies: [
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            path: "Samples/LegacySamples",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "make-samples",
            dependencies: ["LegacySamples", .product(name: "SystemPackage", package: "swift-system")],
            path: "Samples/make-samples",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "notes-app",
            dependencies: [
                "ManagedDocument",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            path: "Samples/notes-app",
            swiftSettings: swiftSettings
        ),
        .target(
            name: "SampleApps",
            dependencies: [
                "ManagedDocument",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            path: "Samples/SampleApps",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "taste-app",
            dependencies: ["SampleApps", .product(name: "ArgumentParser", package: "swift-argument-parser"),
                           .product(name: "GRDB", package: "GRDB.swift")],
            path: "Samples/taste-app",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "diary-app",
            dependencies: ["SampleApps", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            path: "Samples/diary-app",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "time-app",
            dependencies: ["SampleApps", .product(name: "ArgumentParser", package: "swift-argument-parser"),
                           .product(name: "GRDB", package: "GRDB.swift")],
            path: "Samples/time-app",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "docconvert",
            dependencies: [
                "ManagedDocument",
                "CArchive",  // <malloc.h>: mallopt, at start
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            // What the test targets share: the runners of the built docconvert, of the sample apps and of python3, a
            // scratch folder, the seeded generator, and the stores and bundles made in code (Fixtures).
            name: "TestSupport",
            dependencies: [
                "ManagedDocument",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            path: "Tests/TestSupport",
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "ManagedDocumentTests",
            dependencies: [
                "ManagedDocument",
                "LegacySamples",
                "docconvert",
                "notes-app",
                "SampleApps",
                "taste-app",
                "diary-app",
                "time-app",
                "TestSupport",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            // An app's view: the public API only (no @testable import), as a package that depends on this one.
            name: "DocumentAppTests",
            dependencies: [
                "ManagedDocument",
                "TestSupport",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "docconvertTests",
            dependencies: [
                "docconvert",
                "ManagedDocument",
                "TestSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: swiftSettings
        ),
    ]
)
