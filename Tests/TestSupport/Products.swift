import Foundation

/// A product of this package built beside the test bundle (`docconvert`, `notes-app`, the sample apps): the folder of
/// the running test bundle and the two above it are searched, then `.build/debug` of the package.
public func builtProduct(_ name: String) -> String {
    let testBundle = URL(fileURLWithPath: CommandLine.arguments.first { $0.hasSuffix(".xctest") } ?? CommandLine.arguments[0])
    var directory = testBundle.deletingLastPathComponent()
    for _ in 0..<3 {
        let candidate = directory.appendingPathComponent(name)
        if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate.path }
        directory = directory.deletingLastPathComponent()
    }
    // > This file is Tests/TestSupport/Products.swift: three folders up is the package root.
    let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    return packageRoot.appendingPathComponent(".build/debug/\(name)").path
}
