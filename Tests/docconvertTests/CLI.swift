import Dispatch
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

    /// Runs the binary with `arguments`, in `directory` when one is given (the current folder otherwise); with
    /// `unprivileged`, as the user `nobody` when the tests run as root, so that a folder without write permission
    /// refuses writes as it does for a user.
    static func execute(_ arguments: [String], in directory: FilePath? = nil, unprivileged: Bool = false) throws
        -> (status: Int32, stdout: String, stderr: String) {
        let process = Process()
        if unprivileged && geteuid() == 0 {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
            process.arguments = ["--reuid=65534", "--regid=65534", "--clear-groups", "--", binary] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: binary)
            process.arguments = arguments
        }
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory.string) }
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        // Both pipes drained at once: read one to its end before the other and a command that fills the other's pipe
        // (64 KiB on Linux) waits forever for room.
        let group = DispatchGroup()
        nonisolated(unsafe) var stderr = Data()
        group.enter()
        DispatchQueue.global().async {
            stderr = err.fileHandleForReading.readDataToEndOfFile()
            group.leave()
        }
        let stdout = out.fileHandleForReading.readDataToEndOfFile()
        group.wait()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: stdout, as: UTF8.self), String(decoding: stderr, as: UTF8.self))
    }
}
