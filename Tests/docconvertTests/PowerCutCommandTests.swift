// Power cuts on LazyFS while docconvert converts, batches and migrates (scripts/power-cut.sh; docs/RELIABILITY.md,
// "Power cuts on LazyFS"): a legacy store is never gone while its bundle is not whole, every bundle verifies.

import TestSupport
import Testing

@Suite("Power cuts on LazyFS: convert, batch and migrate lose no store and leave no broken bundle")
struct PowerCutCommandTests {
    @Test("convert (--legacy backup and delete), batch and migrate frozen at random moments, the power cut, then killed")
    func commands() throws {
        guard let result = try runPowerCuts(paths: ["convert-backup", "convert-delete", "batch", "migrate"], trials: 2)
        else { return }
        print(result.stdout)
        #expect(result.status == 0, "\(result.stderr)")
    }
}
