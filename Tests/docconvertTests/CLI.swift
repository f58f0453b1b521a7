import Foundation
import SystemPackage

/// Runs the built `docconvert` binary, as a user would.
enum CLI {
    static func temporaryDirectory() throws -> FilePath {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("dc-tests-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return FilePath(url.path)
    }

    /// The `docconvert` built beside the test bundle (or in .build/debug).
    static var binary: String {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let candidates = [CommandLine.arguments.first { $0.contains(".xctest") }.map {
            URL(fileURLWithPath: $0).deletingLastPathComponent().appendingPathComponent("docconvert").path
        }, root.appendingPathComponent(".build/debug/docconvert").path].compactMap { $0 }
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0) } ?? candidates.last!
    }

    static func execute(_ arguments: [String]) throws -> (status: Int32, stdout: String, stderr: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = arguments
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let stdout = out.fileHandleForReading.readDataToEndOfFile()
        let stderr = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: stdout, as: UTF8.self), String(decoding: stderr, as: UTF8.self))
    }
}
