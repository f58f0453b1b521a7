import Foundation
import SystemPackage

/// The sample app `notes-app`, run as a child process whose output (stdout and stderr together) is read as it comes,
/// with `TMPDIR` in `<directory>/tmp` and `XDG_STATE_HOME` (so its working copies, by default) in `<directory>/state`
/// (`state-unprivileged` for a run as another user).
public final class NotesApp {
    public let process = Process()
    private let pipe = Pipe()
    public private(set) var output = ""

    /// - Parameter unprivileged: run as the user `nobody` when the tests run as root (as ``Docconvert/run``), so
    ///   that file permissions count as they do for a user.
    public init(_ arguments: [String], in directory: FilePath, unprivileged: Bool = false) throws {
        if unprivileged && geteuid() == 0 {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
            process.arguments = ["--reuid=65534", "--regid=65534", "--clear-groups", "--", builtProduct("notes-app")]
                + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: builtProduct("notes-app"))
            process.arguments = arguments
        }
        var environment = ProcessInfo.processInfo.environment
        // > Each user's state folder is its own (as under a home of its own): the unprivileged user's apart.
        let state = unprivileged ? "state-unprivileged" : "state"
        environment["TMPDIR"] = directory.appending("tmp").string
        environment["XDG_STATE_HOME"] = directory.appending(state).string
        for folder in ["tmp", state] {
            try FileManager.default.createDirectory(atPath: directory.appending(folder).string, withIntermediateDirectories: true)
            if unprivileged { chmod(directory.appending(folder).string, 0o1777) }
        }
        process.environment = environment
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
    }

    /// Reads the app's output until it says `text`; false when it exited first.
    public func waitFor(_ text: String) -> Bool {
        while !output.contains(text) {
            let data = pipe.fileHandleForReading.availableData
            if data.isEmpty { return false }
            output += String(decoding: data, as: UTF8.self)
        }
        return true
    }

    /// Waits for the app to exit and returns its status and whole output.
    public func finish() -> (status: Int32, output: String) {
        output += String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (process.terminationStatus, output)
    }

    /// Runs the app to its end: its status and whole output.
    public static func run(_ arguments: [String], in directory: FilePath, unprivileged: Bool = false) throws
        -> (status: Int32, output: String) {
        try NotesApp(arguments, in: directory, unprivileged: unprivileged).finish()
    }
}
