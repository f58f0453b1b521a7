import Foundation

/// The system tools some tests run, and whether they work here: a test that needs one is skipped by the test
/// framework, with the reason, where it does not (never passed without having run).
public enum Tools {
    /// `/usr/bin/strace`, when it is installed. (Whether it may trace here is not probed in advance: a probe would
    /// start a process inside the very runs a test traces; a test that then traces nothing fails and says so.)
    public static let straceUnavailable: String? = FileManager.default.isExecutableFile(atPath: "/usr/bin/strace")
        ? nil : "/usr/bin/strace is not installed (scripts/setup.sh installs it)"

    /// `/usr/bin/time` (GNU time, for a child's peak memory), when it is installed.
    public static let timeUnavailable: String? = FileManager.default.isExecutableFile(atPath: "/usr/bin/time")
        ? nil : "/usr/bin/time is not installed (scripts/setup.sh installs it)"
}
