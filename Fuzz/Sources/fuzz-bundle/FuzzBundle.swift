// Opening, verifying and extracting a bundle from bytes: the central directory, local headers, names, the metadata
// JSON, the restart index, EntryReader and the parallel inflater, libarchive's walk.
import Foundation
import FuzzSupport
@testable import ManagedDocument
import SystemPackage

private let scratch = FuzzScratch("bundle")

@_cdecl("fuzz_bundle_main")
public func fuzzMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> Int32 {
    runFuzzer(argc, argv) { data, size in fuzzBundle(data ?? UnsafePointer(bitPattern: 1)!, size) }
}

func fuzzBundle(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bundle = scratch.write(data, size, named: "input.mdz")
    var limits = ReadingLimits()
    limits.maxTotalUncompressedSize = 64 << 20  // keep one input's work bounded, as an app would
    guard let reader = try? BundleReader(at: bundle, limits: limits) else { return 0 }
    _ = reader.notices
    let out = scratch.folder.appending("out")
    _ = try? reader.extract(into: out)
    try? FileSystem.removeTree(out)
    _ = try? reader.verifyEntries()
    return 0
}
