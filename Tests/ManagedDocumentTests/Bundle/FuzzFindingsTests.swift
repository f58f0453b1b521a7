import Foundation
import GRDB
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
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

    @Test("a Core Data store whose Z_METADATA holds values of other types converts, the odd values recorded as absent")
    func coreDataMetadataOfOtherTypes() async throws {
        // fuzz legacy, crash-bf17d9ab: Z_UUID held a blob that is not UTF-8, and GRDB's typed subscript trapped.
        try await withTemporaryDirectory { directory in
            let store = directory.appending("Odd.sqlite")
            let queue = try DatabaseQueue(path: store.string)
            try await queue.write { db in
                try db.execute(sql: """
                    CREATE TABLE Z_PRIMARYKEY (Z_ENT INTEGER PRIMARY KEY, Z_NAME VARCHAR, Z_SUPER INTEGER, Z_MAX INTEGER);
                    CREATE TABLE Z_METADATA (Z_VERSION INTEGER PRIMARY KEY, Z_UUID VARCHAR(255), Z_PLIST BLOB);
                    CREATE TABLE ZNOTE (Z_PK INTEGER PRIMARY KEY, ZTEXT VARCHAR);
                    INSERT INTO ZNOTE VALUES (1, 'kept');
                    """)
                try db.execute(sql: "INSERT INTO Z_METADATA VALUES (89666017, ?, 'text, not a plist')",
                               arguments: [Data([0xFF, 0xFE, 0x00, 0xC3, 0x28] + [UInt8](repeating: 0xA0, count: 19))])
            }
            try queue.close()
            var options = ConversionOptions()
            options.legacyPolicy = .keep
            let report = try LegacyConverter(options: options).convert(storeAt: store)
            let metadata = try BundleReader(at: FilePath(report.bundle)).metadata
            #expect(metadata.provenance?.coreData?.storeUUID == nil)
            #expect(metadata.provenance?.coreData?.metadataVersion == 89666017)
            #expect(try Fixtures.bundleDigests(FilePath(report.bundle))["ZNOTE"]?.hasPrefix("1:") == true)
        }
    }
}
