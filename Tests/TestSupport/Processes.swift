import Dispatch
import Foundation
import SystemPackage

/// Runs `executable` (a path, or a program found on `PATH` through `/usr/bin/env`) with `arguments` to its end, in
/// `directory` when one is given and with `environment` when one is given (this process's otherwise); its exit
/// status, standard output and standard error.
///
/// Both pipes are drained at once: read one to its end before the other, and a program that fills the other's pipe
/// (64 KiB on Linux) waits forever for room.
public func execute(_ executable: String, _ arguments: [String], in directory: FilePath? = nil,
                    environment: [String: String]? = nil) throws -> (status: Int32, stdout: String, stderr: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable.hasPrefix("/") ? executable : "/usr/bin/env")
    process.arguments = executable.hasPrefix("/") ? arguments : [executable] + arguments
    if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory.string) }
    if let environment { process.environment = environment }
    let out = Pipe(), err = Pipe()
    process.standardOutput = out
    process.standardError = err
    try process.run()
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

/// Runs an external program (a path, or a program found on `PATH`) to its end; its exit status and its standard
/// output and error together, in the order written (one pipe).
@discardableResult
public func run(_ executable: String, _ arguments: [String], in directory: FilePath? = nil) throws
    -> (status: Int32, output: String) {
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

/// A program run by a test that exited with another status than 0.
public struct ProcessFailure: Error, CustomStringConvertible {
    public var program: String
    public var status: Int32
    public var stderr: String
    public var description: String { "\(program) exited with status \(status): \(stderr)" }
}

/// Runs `body` with a fresh folder (mode 0755 under the usual umask, so that another uid can look in) that is
/// removed afterwards. Tests run in parallel: each owns its folder.
public func withTemporaryDirectory<T>(_ body: (FilePath) async throws -> T) async throws -> T {
    let base = FileManager.default.temporaryDirectory.appendingPathComponent("md-tests-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: base, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: base) }  // Squash cleanup error of a scratch folder.
    return try await body(FilePath(base.path))
}
