import Foundation
import SystemPackage

/// `scripts/power-cut.sh` run on `paths` for `trials` cuts each, against the products built beside the tests: its
/// exit status and output. `nil`, with the reason printed, when LazyFS cannot be built or mounted here (not root, no
/// `/dev/fuse`, no LazyFS beside the package, a failed build): the script's status 77.
///
/// LazyFS is built once into `.build-lazyfs/` (by `scripts/setup.sh`, or by the first run, about 35 s).
public func runPowerCuts(paths: [String], trials: Int) throws -> (status: Int32, stdout: String, stderr: String)? {
    // > This file is Tests/TestSupport/PowerCuts.swift: three folders up is the package root.
    let packageRoot = FilePath(#filePath).removingLastComponent().removingLastComponent().removingLastComponent()
    var environment = ProcessInfo.processInfo.environment
    environment["POWER_CUT_PATHS"] = paths.joined(separator: " ")
    environment["BIN"] = FilePath(builtProduct("docconvert")).removingLastComponent().string
    let result = try execute(packageRoot.appending("scripts/power-cut.sh").string, [String(trials)],
                             environment: environment)
    if result.status == 77 {
        let reason = result.stderr.split(separator: "\n").last { $0.contains("skipped") } ?? "LazyFS is unavailable"
        print("skipping power cuts on LazyFS (\(paths.joined(separator: ", "))): \(reason)")
        return nil
    }
    return result
}
