import Foundation
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

@Suite("Writes are atomic: a killed writer never leaves a partial bundle")
struct AtomicityTests {
    @Test("SIGKILL at random moments leaves nothing, the old bundle, or a complete new one; the next write cleans up")
    func killedWriters() async throws {
        try await withTemporaryDirectory { directory in
            let source = try Fixtures.makeStore(at: directory.appending("big.sqlite"), rows: 40_000, blobSize: 200)
            let target = directory.appending("Doc.mdz")
            // How long an uninterrupted write takes, to spread the kills over it.
            let started = Date()
            let first = try run(Docconvert.binary, ["create", target.string, "--from", source.string, "--level", "6"])
            #expect(first.status == 0, "\(first.output)")
            let duration = Date().timeIntervalSince(started)
            let original = try Fixtures.bytes(of: target)
            try FileSystem.removeFile(target)

            var generator = SeededGenerator(seed: 42)
            var outcomes = (absent: 0, complete: 0)
            for trial in 0..<50 {
                let process = Process()
                process.executableURL = URL(fileURLWithPath: Docconvert.binary)
                process.arguments = ["create", target.string, "--from", source.string, "--level", "6"]
                process.standardOutput = FileHandle.nullDevice
                process.standardError = FileHandle.nullDevice
                try process.run()
                let delay = Double.random(in: 0...(duration * 1.1), using: &generator)
                try await Task.sleep(nanoseconds: UInt64(delay * 1e9))
                kill(process.processIdentifier, SIGKILL)
                process.waitUntilExit()
                if try FileSystem.exists(target) {
                    // Under the final name: only ever a complete, valid bundle.
                    let reader = try BundleReader(at: target)
                    try reader.verifyEntries()
                    #expect(reader.metadata.store.size > 0, "trial \(trial)")
                    outcomes.complete += 1
                    try FileSystem.removeFile(target)
                } else {
                    outcomes.absent += 1
                }
            }
            #expect(outcomes.absent + outcomes.complete == 50)
            // The next write to the same place removes what the killed writers left behind.
            try BundleWriter.createDocument(at: target, copyingStore: source)
            let leftovers = try FileSystem.contentsOfDirectory(directory).filter {
                $0.hasSuffix(AtomicFile.temporarySuffix) || $0.hasSuffix(ScratchDirectory.suffix)
            }
            #expect(leftovers.isEmpty, "stray temporaries: \(leftovers)")
            #expect(try Fixtures.bytes(of: target).count > 0)
            #expect(original.count > 0)
        }
    }

    @Test("temporaries are locked from the moment their names appear; cleaning leaves live ones and removes dead ones")
    func temporariesAndCleaners() async throws {
        try await withTemporaryDirectory { directory in
            let target = directory.appending("Doc.mdz")
            func temporaries() throws -> [String] {
                try FileSystem.contentsOfDirectory(directory).filter { $0.hasPrefix(".Doc.mdz.") }.sorted()
            }
            do {
                let file = try AtomicFile(target: target, replacing: false)
                let scratch = try ScratchDirectory(besides: target)
                try Fixtures.write([1, 2, 3], to: scratch.path.appending("persistentStore"))
                for name in try temporaries() where !name.hasSuffix(".d") {
                    // Another open file description cannot take the lock: the writer is seen as alive.
                    let other = try FileDescriptor.open(directory.appending(name), .readOnly)
                    #expect(!FileSystem.lockExclusively(other, wait: false), "\(name) is locked")
                    try other.close()
                }
                let live = try temporaries()
                #expect(live.count == 3, "\(live)")  // the file, the folder and the folder's lock file
                try AtomicFile.removeStaleTemporaries(for: target)
                #expect(try temporaries() == live, "live temporaries stay")
                file.discard()
                _ = scratch
            }
            #expect(try temporaries() == [], "a finished writer leaves nothing")

            // What a writer that died leaves: a file and a folder with its lock file, nobody holding them; and a
            // folder of an earlier version, whose lock file is inside it.
            try Fixtures.write([9], to: directory.appending(".Doc.mdz.dead0001.partial"))
            try FileSystem.createDirectory(directory.appending(".Doc.mdz.dead0002.partial.d"))
            try Fixtures.write([9], to: directory.appending(".Doc.mdz.dead0002.partial"))
            try Fixtures.write([9], to: directory.appending(".Doc.mdz.dead0002.partial.d/persistentStore"))
            try FileSystem.createDirectory(directory.appending(".Doc.mdz.old00003.partial.d"))
            try Fixtures.write([], to: directory.appending(".Doc.mdz.old00003.partial.d/.lock"))
            try Fixtures.write([9], to: directory.appending(".Doc.mdz.old00003.partial.d/persistentStore"))
            try FileSystem.createDirectory(directory.appending(".Doc.mdz.bare0004.partial.d"))
            try AtomicFile.removeStaleTemporaries(for: target)
            #expect(try temporaries() == [], "dead temporaries are removed")
        }
    }

    @Test("replacing a bundle that is killed mid-write leaves the previous bundle byte for byte")
    func killedReplacementKeepsPrevious() async throws {
        try await withTemporaryDirectory { directory in
            let target = directory.appending("Doc.mdz")
            try Fixtures.makeBundle(at: target, rows: 10)
            let previous = try Fixtures.bytes(of: target)
            let store = try Fixtures.makeStore(at: directory.appending("big.sqlite"), rows: 20_000)
            // A replacement that fails halfway (its store shrinks under it) must leave the previous bundle intact.
            let truncated = directory.appending("truncated.sqlite")
            try FileManager.default.copyItem(atPath: store.string, toPath: truncated.string)
            let handle = try FileDescriptor.open(truncated, .writeOnly)
            #expect(ftruncate(handle.rawValue, 100) == 0)
            try handle.close()
            let error = #expect(throws: DocumentError.self) {
                try BundleWriter.write(BundleContent(store: truncated), metadata: DocumentMetadata(), to: target,
                                       replacingExisting: true)
            }
            #expect(error != nil)
            #expect(try Fixtures.bytes(of: target) == previous)
            #expect(try FileSystem.contentsOfDirectory(directory).sorted() == ["Doc.mdz", "big.sqlite", "truncated.sqlite"])
        }
    }
}
