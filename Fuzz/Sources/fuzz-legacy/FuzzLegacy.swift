// Legacy detection of a file, and the Core Data metadata decoder (Z_METADATA's plist) on the same bytes.
import Foundation
import FuzzSupport
import GRDB
@_spi(Core) import MDZCore
@testable import ManagedDocument
import SystemPackage

private let scratch = FuzzScratch("legacy")

@_cdecl("fuzz_legacy_main")
public func fuzzMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> Int32 {
    runFuzzer(argc, argv) { data, size in fuzzLegacy(data ?? UnsafePointer(bitPattern: 1)!, size) }
}

func fuzzLegacy(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let file = scratch.write(bytes, named: "Store.sqlite")
    if case .legacyStore = (try? LegacyDetector.detect(at: file)) ?? .notAStore(reason: "") {
        var configuration = Configuration()
        configuration.readonly = true
        if let queue = try? DatabaseQueue(path: file.string, configuration: configuration) {
            _ = try? queue.read { db in
                if try CoreDataMetadata.isCoreDataStore(db) { _ = try CoreDataMetadata.read(db) }
            }
            try? queue.close()
        }
    }
    // The same bytes as Core Data's metadata plist.
    if let queue = try? DatabaseQueue() {
        _ = try? queue.write { db in
            try db.execute(sql: "CREATE TABLE Z_METADATA (Z_VERSION INTEGER PRIMARY KEY, Z_UUID VARCHAR(255), Z_PLIST BLOB)")
            try db.execute(sql: "INSERT INTO Z_METADATA VALUES (1, 'x', ?)", arguments: [Data(bytes)])
            _ = try CoreDataMetadata.read(db)
        }
    }
    return 0
}
