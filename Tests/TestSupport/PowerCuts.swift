import Foundation
import Glibc
import SystemPackage

/// LazyFS, the power-cut file system of `scripts/power-cut.sh`, as the tests that cut power need it.
public enum PowerCuts {
    /// This file is Tests/TestSupport/PowerCuts.swift: three folders up is the package root.
    static let packageRoot = FilePath(#filePath).removingLastComponent().removingLastComponent().removingLastComponent()

    /// Why power cuts cannot run here, or `nil` when they can: what `scripts/power-cut.sh` needs before it mounts
    /// (root, `/dev/fuse`, LazyFS beside the package) and the LazyFS that `scripts/setup.sh` builds into
    /// `.build-lazyfs/` (about 35 s, once). The tests that cut power are skipped with it, by the test framework; once
    /// these hold, a run that still cannot mount fails.
    public static var unavailable: String? {
        let environment = ProcessInfo.processInfo.environment
        let tools = environment["LAZYFS_TOOLS"].map { FilePath($0) } ?? packageRoot.removingLastComponent().appending("shared/tools")
        let cache = environment["LAZYFS_CACHE"].map { FilePath($0) } ?? packageRoot.appending(".build-lazyfs")
        if getuid() != 0 { return "LazyFS needs root (FUSE with allow_other)" }
        var status = stat()
        if stat("/dev/fuse", &status) != 0 || status.st_mode & S_IFMT != S_IFCHR { return "no /dev/fuse" }
        if !FileManager.default.isExecutableFile(atPath: tools.appending("lazyfs.sh").string) {
            return "no LazyFS at \(tools) (lazyfs.sh and lazyfs/)"
        }
        if !FileManager.default.isExecutableFile(atPath: cache.appending("build/lazyfs/build/lazyfs").string) {
            return "LazyFS is not built in \(cache) (scripts/setup.sh builds it; see .build-lazyfs.log)"
        }
        return nil
    }

    /// `unavailable` as the reason a test framework prints for a skipped test.
    public static var reason: String { unavailable ?? "" }
}

/// `scripts/power-cut.sh` run on `paths` for `trials` cuts each, against the products built beside the tests: its
/// exit status and output. Call it only where ``PowerCuts/unavailable`` is `nil`: a run that then reports LazyFS
/// unusable (status 77: it did not mount) is returned like any other failure.
public func runPowerCuts(paths: [String], trials: Int) throws -> (status: Int32, stdout: String, stderr: String) {
    var environment = ProcessInfo.processInfo.environment
    environment["POWER_CUT_PATHS"] = paths.joined(separator: " ")
    environment["BIN"] = FilePath(builtProduct("docconvert")).removingLastComponent().string
    return try execute(PowerCuts.packageRoot.appending("scripts/power-cut.sh").string, [String(trials)],
                       environment: environment)
}
