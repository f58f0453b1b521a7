// Power cuts on LazyFS while docconvert converts, batches and migrates (scripts/power-cut.sh; docs/RELIABILITY.md,
// "Power cuts on LazyFS"): a legacy store is never gone while its bundle is not whole, every bundle verifies.

import TestSupport
import Testing

@Suite("Power cuts on LazyFS: convert, batch and migrate lose no store and leave no broken bundle")
struct PowerCutCommandTests {
    @Test("convert (--legacy backup and delete, a 16 MiB store), batch and migrate frozen at a random moment, the power cut, then killed",
          .enabled(if: PowerCuts.unavailable == nil, Comment(rawValue: PowerCuts.reason)))
    func commands() throws {
        // > One cut per path here (with a run to its end before it, each path takes 10-25 s); scripts/power-cut.sh
        // > runs more: docs/RELIABILITY.md, "Power cuts on LazyFS".
        let paths = ["convert-backup", "convert-delete", "convert-large", "batch", "migrate"]
        let result = try runPowerCuts(paths: paths, trials: 1)
        print(result.stdout)
        #expect(result.status == 0, "\(result.stderr)")
    }
}
