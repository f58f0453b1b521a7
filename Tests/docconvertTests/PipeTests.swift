import Dispatch
import Foundation
import SystemPackage
import TestSupport
import Testing

/// `CLI.execute` itself: a command that fills its error pipe before it finishes its output still ends.
@Suite("docconvert through pipes")
struct PipeTests {
    @Test("verify over 3,000 missing bundles writes over 64 KiB to stderr before its ok line; every line arrives")
    func fullErrorPipe() throws {
        let directory = try CLI.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory.string) }  // Squash cleanup error.
        let good = directory.appending("Good.mdz").string
        #expect(try Docconvert.run(["create", good]).status == 0)
        let padding = String(repeating: "x", count: 80)
        let missing = (0..<3_000).map { directory.appending("missing-\(padding)-\($0).mdz").string }

        // Read on another thread, so that a deadlock fails the test instead of hanging it.
        nonisolated(unsafe) var result: (status: Int32, stdout: String, stderr: String)?
        nonisolated(unsafe) var failure: (any Error)?
        let done = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            do { result = try Docconvert.run(["verify"] + missing + [good]) } catch { failure = error }
            done.signal()
        }
        guard done.wait(timeout: .now() + 60) == .success else {
            Issue.record("docconvert verify did not end within a minute: its stderr pipe filled and nobody read it")
            return
        }
        if let failure { throw failure }
        let run = try #require(result)
        #expect(run.status == 66)
        #expect(run.stderr.utf8.count > 64 * 1024)
        let lines = run.stderr.split(separator: "\n")
        #expect(lines.count == missing.count)
        #expect(zip(lines, missing).allSatisfy { $0.hasPrefix("error: \($1)") })
        #expect(run.stdout.hasPrefix("ok: \(good): "))
    }
}
