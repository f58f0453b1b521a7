import Foundation
import SystemPackage
import Testing
@testable import ManagedDocument

/// Inputs the fuzzers (scripts/fuzz.sh) found that crashed or misbehaved, kept as tests (and as seeds in
/// Fuzz/Corpus). docs/RELIABILITY.md lists them.
@Suite("Fuzzing findings stay fixed")
struct FuzzFindingsTests {
    private func refusal(_ bytes: [UInt8]) async throws -> DocumentError? {
        try await withTemporaryDirectory { directory in
            let file = directory.appending("input.mdz")
            try Fixtures.write(bytes, to: file)
            return #expect(throws: DocumentError.self) { _ = try BundleReader(at: file) }
        }
    }

    @Test("an end record in the first 20 bytes (no room for a zip64 locator) is refused, not an arithmetic trap")
    func endRecordNearTheStart() async throws {
        // fuzz bundle, crash-85434e0c: the locator's offset was computed before checking there was room for it.
        let bytes: [UInt8] = [
            0x50, 0x0b, 0x00, 0x01, 0x04, 0xe9, 0x03, 0x00, 0x00, 0x04, 0xe9, 0x03,
            0x00, 0x00, 0x50, 0x4b, 0x05, 0x06, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00,
            0xfe, 0xff, 0x67, 0xff, 0xff, 0xff, 0x74, 0x05, 0x00, 0x00, 0x00, 0x00,
        ]
        let error = try await refusal(bytes)
        #expect([.corruptArchive, .notAZipArchive, .truncatedArchive].contains(error?.code), "\(String(describing: error))")
    }

    @Test("a zip64 locator pointing at the very end of the offsets is refused, not an arithmetic trap")
    func zip64LocatorAtTheEnd() async throws {
        var bytes = [UInt8](repeating: 0, count: 24)
        bytes.appendLE(UInt32(0x0706_4b50))  // zip64 end of central directory locator
        bytes.appendLE(UInt32(0))
        bytes.appendLE(UInt64.max - 10)  // where the zip64 end record would be
        bytes.appendLE(UInt32(1))
        bytes.appendLE(UInt32(0x0605_4b50))  // end of central directory record
        bytes += [UInt8](repeating: 0, count: 6)
        bytes.appendLE(UInt16(0xFFFF))
        bytes += [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x00]  // sizes deferred to zip64, no comment
        let error = try await refusal(bytes)
        #expect(error?.code == .corruptArchive, "\(String(describing: error))")
    }
}
