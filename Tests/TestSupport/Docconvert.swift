import Foundation
import SystemPackage

/// The built `docconvert` binary, run as a user would. The one runner of the command for every test target.
public enum Docconvert {
    /// The `docconvert` built beside the test bundle (or in `.build/debug`).
    public static var binary: String { builtProduct("docconvert") }

    /// Runs the binary with `arguments` to its end, both pipes drained at once: in `directory` when one is given
    /// (the current folder otherwise), with `environment` when one is given (this process's otherwise); with
    /// `unprivileged`, as the user `nobody` when the tests run as root, so that a folder without write permission
    /// refuses writes as it does for a user.
    public static func run(_ arguments: [String], in directory: FilePath? = nil, unprivileged: Bool = false,
                           environment: [String: String]? = nil) throws
        -> (status: Int32, stdout: String, stderr: String) {
        if unprivileged && geteuid() == 0 {
            return try execute("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", "--", binary]
                               + arguments, in: directory, environment: environment)
        }
        return try execute(binary, arguments, in: directory, environment: environment)
    }
}
