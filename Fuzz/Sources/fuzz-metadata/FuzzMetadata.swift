// The metadata decoder: DocumentMetadata.json as a bundle carries it, untrusted.
import Foundation
import FuzzSupport
@_spi(Core) import MDZCore
@testable import ManagedDocument

@_cdecl("fuzz_metadata_main")
public func fuzzMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> Int32 {
    runFuzzer(argc, argv) { data, size in fuzzMetadata(data ?? UnsafePointer(bitPattern: 1)!, size) }
}

func fuzzMetadata(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    if let metadata = try? DocumentMetadata.decode(bytes, bundle: nil) {
        // What decodes must encode and decode to the same value.
        guard let encoded = try? metadata.encoded() else { fatalError("metadata that decodes does not encode") }
        guard let again = try? DocumentMetadata.decode(Array(encoded), bundle: nil) else {
            fatalError("metadata that decodes does not decode once encoded: \(String(decoding: encoded, as: UTF8.self))")
        }
        guard again == metadata else {
            var left = "", right = ""
            dump(metadata, to: &left)
            dump(again, to: &right)
            let differing = zip(left.split(separator: "\n"), right.split(separator: "\n")).filter { $0 != $1 }
            fatalError("metadata that decodes does not round-trip: \(differing.prefix(3))")
        }
    }
    return 0
}
