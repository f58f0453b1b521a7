import Foundation
import SystemPackage

/// Runs `body` with a fresh folder that is removed afterwards. Tests run in parallel: each owns its folder.
func withTemporaryDirectory<T>(_ body: (FilePath) async throws -> T) async throws -> T {
    let base = FileManager.default.temporaryDirectory.appendingPathComponent("md-tests-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: base, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: base) }  // Squash cleanup error of a scratch folder.
    return try await body(FilePath(base.path))
}

/// The shared corpus of real third-party files, `../shared/corpus` relative to the package root.
enum Corpus {
    static var root: FilePath? {
        let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent()
        let corpus = packageRoot.deletingLastPathComponent().appendingPathComponent("shared/corpus")
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: corpus.path, isDirectory: &isDirectory), isDirectory.boolValue
        else {
            print("skipping corpus checks: \(corpus.path) is absent")
            return nil
        }
        return FilePath(corpus.path)
    }

    /// Every regular file below a corpus folder, sorted.
    static func files(in folder: String) -> [FilePath] {
        guard let root else { return [] }
        let base = root.appending(folder)
        guard let enumerator = FileManager.default.enumerator(atPath: base.string) else { return [] }
        var result: [FilePath] = []
        while let relative = enumerator.nextObject() as? String {
            let path = base.appending(relative)
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: path.string, isDirectory: &isDirectory), !isDirectory.boolValue {
                result.append(path)
            }
        }
        return result.sorted { $0.string < $1.string }
    }
}

/// Runs an external program and returns its exit status and combined output.
@discardableResult
func run(_ executable: String, _ arguments: [String], in directory: FilePath? = nil) throws -> (status: Int32, output: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable.hasPrefix("/") ? executable : "/usr/bin/env")
    process.arguments = executable.hasPrefix("/") ? arguments : [executable] + arguments
    if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory.string) }
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = pipe
    try process.run()
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: data, as: UTF8.self))
}

/// The built `docconvert` binary, beside the test bundle in the build folder.
var docconvertBinary: String { builtProduct("docconvert") }

/// A product built beside the test bundle (`docconvert`, `notes-app`).
func builtProduct(_ name: String) -> String {
    let testBundle = URL(fileURLWithPath: CommandLine.arguments.first { $0.hasSuffix(".xctest") } ?? CommandLine.arguments[0])
    var directory = testBundle.deletingLastPathComponent()
    for _ in 0..<3 {
        let candidate = directory.appendingPathComponent(name)
        if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate.path }
        directory = directory.deletingLastPathComponent()
    }
    let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()
    return packageRoot.appendingPathComponent(".build/debug/\(name)").path
}
