// Opening, verifying and extracting a bundle from bytes: the central directory, local headers, names, the metadata
// JSON, the restart index, EntryReader and the parallel inflater, libarchive's walk; and reading the store in place,
// segment by segment, with its oracle: whatever the segments serve is what inflating the entry in one stream gives
// (every zip tool's reading), whenever both succeed (FORMAT.md 11.4: the polyglot family of scripts/hostile/polyglot.py).
import Foundation
import FuzzSupport
@_spi(Core) import MDZCore
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
    checkInPlace(reader)
    return 0
}

/// Reads the whole store in place and, when that succeeds, compares it with the entry inflated in one stream.
private func checkInPlace(_ reader: BundleReader) {
    guard case .inPlace(let plan) = StoreRoute(reader), plan.size > 0, plan.size <= 64 << 20 else { return }
    let source = InPlaceStore(reader, plan: plan, cacheSize: 8 << 20)
    var served = [UInt8](repeating: 0, count: Int(plan.size))
    let count = try? served.withUnsafeMutableBytes { try source.read(into: $0.baseAddress!, count: $0.count, at: 0) }
    guard count == served.count, plan.restarts != nil, let whole = oneStream(reader, plan) else { return }
    precondition(whole == served, "the store read in place differs from the entry inflated in one stream")
}

/// The store entry inflated as one deflate stream, as zip tools inflate it: `nil` unless it ends exactly at the
/// entry's end with exactly the declared size.
private func oneStream(_ reader: BundleReader, _ plan: SegmentPlan) -> [UInt8]? {
    guard plan.compressedSize <= 64 << 20, let inflater = StreamInflater(),
          let compressed = try? FileSystem.read(reader.descriptor, at: Int64(plan.dataOffset),
                                                count: Int(plan.compressedSize), path: reader.path),
          compressed.count == Int(plan.compressedSize) else { return nil }
    var output = [UInt8](repeating: 0, count: Int(plan.size) + 1)
    var produced = 0
    var finished = false
    compressed.withUnsafeBytes { input in
        inflater.reset()
        inflater.feed(input)
        output.withUnsafeMutableBytes { buffer in
            while !finished, produced < buffer.count,
                  let (count, done) = inflater.inflate(into: UnsafeMutableRawBufferPointer(rebasing: buffer[produced...])) {
                produced += count
                finished = done
                if count == 0 && !done { break }
            }
        }
    }
    guard finished, produced == Int(plan.size), !inflater.hasTrailingBytes else { return nil }
    return Array(output.prefix(produced))
}
