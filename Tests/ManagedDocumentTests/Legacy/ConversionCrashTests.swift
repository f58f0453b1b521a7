import Foundation
import LegacySamples
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

@Suite("Conversion survives SIGKILL at any moment")
struct ConversionCrashTests {
    @Test("killed at random moments 60 times: the legacy store or a complete bundle is always there, and a rerun finishes with no loss")
    func killedConversions() async throws {
        try await withTemporaryDirectory { directory in
            var generator = SeededGenerator(seed: 7)
            // How long one conversion takes here, to spread the kills over it.
            let probe = directory.appending("probe")
            try FileManager.default.createDirectory(atPath: probe.string, withIntermediateDirectories: true)
            try LegacySamples.makeTimeStore(in: probe)
            let started = Date()
            #expect(try run(Docconvert.binary, ["convert", probe.appending("minimalTime.sqlite").string]).status == 0)
            let duration = Date().timeIntervalSince(started)

            var outcomes: [String: Int] = [:]
            for trial in 0..<60 {
                let folder = directory.appending("trial\(trial)")
                try FileManager.default.createDirectory(atPath: folder.string, withIntermediateDirectories: true)
                let sample = trial % 2 == 0 ? try LegacySamples.makeTimeStore(in: folder)
                    : try LegacySamples.makeDiaryStore(in: folder)
                let source = folder.appending(sample.source)
                let bundle = folder.appending(sample.name + ".mdz")
                let expected = try Fixtures.digestsAsSQLiteReads(source)

                let process = Process()
                process.executableURL = URL(fileURLWithPath: Docconvert.binary)
                process.arguments = ["convert", source.string, "--legacy", "backup"]
                process.standardOutput = FileHandle.nullDevice
                process.standardError = FileHandle.nullDevice
                try process.run()
                try await Task.sleep(nanoseconds: UInt64(Double.random(in: 0...(duration * 1.2), using: &generator) * 1e9))
                kill(process.processIdentifier, SIGKILL)
                process.waitUntilExit()

                // The invariant, right after the kill.
                let hasBundle = try FileSystem.exists(bundle)
                if hasBundle {
                    try BundleReader(at: bundle).verifyEntries()
                    #expect(try Fixtures.bundleDigests(bundle) == expected, "trial \(trial): bundle content")
                }
                let hasLegacy = FileSystem.isRegularFile(source)
                if hasLegacy && !hasBundle {
                    #expect(try Fixtures.digestsAsSQLiteReads(source) == expected, "trial \(trial): legacy content")
                }
                #expect(hasBundle || hasLegacy, "trial \(trial): neither the legacy store nor a bundle")
                outcomes[hasBundle ? (hasLegacy ? "both" : "bundle") : "legacy", default: 0] += 1

                // Running the same command again finishes the job.
                let rerun = try run(Docconvert.binary, ["convert", source.string, "--legacy", "backup"])
                #expect(rerun.status == 0, "trial \(trial): \(rerun.output)")
                #expect(try Fixtures.bundleDigests(bundle) == expected, "trial \(trial): final bundle")
                #expect(!FileSystem.isRegularFile(source), "trial \(trial): legacy store not moved to the backup")
                let backups = try FileSystem.contentsOfDirectory(folder.appending("docconvert-backup"))
                #expect(backups.count == 1)
                let backedUp = folder.appending("docconvert-backup").appending(backups[0]).appending(sample.source)
                #expect(try Fixtures.digestsAsSQLiteReads(backedUp) == expected, "trial \(trial): backup content")
                let leftovers = try FileSystem.contentsOfDirectory(folder).filter {
                    $0.hasSuffix(AtomicFile.temporarySuffix) || $0.hasSuffix(ScratchDirectory.suffix)
                }
                #expect(leftovers.isEmpty, "trial \(trial): \(leftovers)")
            }
            print("conversion kill outcomes: \(outcomes)")
        }
    }
}
