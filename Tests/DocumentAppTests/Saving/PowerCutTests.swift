// Power cuts on LazyFS, from an app's side: `notes-app journal` writing a document and its working copy on a file
// system that drops every unflushed byte at a cut (scripts/power-cut.sh; docs/RELIABILITY.md, "Power cuts on
// LazyFS"). The converting paths: Tests/docconvertTests/PowerCutCommandTests.swift.

import TestSupport
import Testing

@Suite("Power cuts on LazyFS: a writer saving often loses no acknowledged commit or save")
struct PowerCutTests {
    @Test("notes-app journal frozen at a random moment and inside a save, the power cut, then killed: the bundle verifies, every save and commit is there",
          .enabled(if: PowerCuts.unavailable == nil, Comment(rawValue: PowerCuts.reason)))
    func appJournal() throws {
        // > Two cuts: the first at a random moment, the second just after a save began.
        let result = try runPowerCuts(paths: ["app"], trials: 2)
        print(result.stdout)
        #expect(result.status == 0, "\(result.stderr)")
    }
}
