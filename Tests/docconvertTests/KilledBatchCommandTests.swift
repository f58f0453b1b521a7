import Foundation
import SystemPackage
import TestSupport
import Testing

/// After a batch killed with SIGKILL, a rerun leaves no lock files behind.
@Suite("docconvert: a killed batch leaves no lock files")
struct KilledBatchCommandTests {
    @Test("a batch killed with SIGKILL leaves lock files beside items it finished; a rerun removes them, every bundle whole")
    func killedRunLockFilesRemoved() throws {
        try LegacyFiles.withDirectory { directory in
            let count = 60
            var tree = directory.appending("tree-0")
            var leftBehind: [String] = []
            // > The kill must come while a finished item still holds its lock (its files moved, its lock not yet
            // > released): the folder is watched for that, and the kill sent at once; a fresh tree when it was missed.
            for attempt in 0..<12 where leftBehind.isEmpty {
                tree = directory.appending("tree-\(attempt)")
                try LegacyFiles.makeStores(count, in: tree)
                let batch = Process()
                batch.executableURL = URL(fileURLWithPath: Docconvert.binary)
                batch.arguments = ["batch", tree.string, "--jobs", "2", "--quiet"]
                batch.standardOutput = FileHandle.nullDevice
                batch.standardError = FileHandle.nullDevice
                try batch.run()
                while batch.isRunning {
                    if !LegacyFiles.lockFilesOfDoneItems(in: tree).isEmpty {
                        kill(batch.processIdentifier, SIGKILL)
                        break
                    }
                }
                batch.waitUntilExit()
                leftBehind = LegacyFiles.lockFilesOfDoneItems(in: tree)
            }
            try #require(!leftBehind.isEmpty, "no kill came while a finished item held its lock, in 12 runs")

            let rerun = try Docconvert.run(["batch", tree.string, "--jobs", "2", "--quiet"])
            #expect(rerun.status == 0, "\(rerun.stderr)")
            let remaining = try LegacyFiles.files(under: tree).keys.filter {
                $0.hasSuffix(".lock") || FilePath($0).lastComponent?.string.hasPrefix(".docconvert-lock") == true
            }
            #expect(remaining.isEmpty, "left after the rerun: \(remaining.sorted()) (after the kill: \(leftBehind))")
            let bundles = try FileManager.default.contentsOfDirectory(atPath: tree.string).filter { $0.hasSuffix(".mdz") }
            #expect(bundles.count == count)
            let verified = try Docconvert.run(["verify"] + bundles.map { tree.appending($0).string })
            #expect(verified.status == 0, "\(verified.stderr)")
            let rows = try LegacyFiles.bundleRows(in: tree)
            for n in 0..<count {
                let name = String(format: "s%02d", n)
                #expect(rows["\(name).mdz"] == (0..<20).map { "\(name) \($0)" }.joined(separator: ","), "\(name)")
            }
        }
    }
}
