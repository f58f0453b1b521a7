// The segment inflater with an untrusted restart index: the input is a little header (interval, size, offsets)
// followed by "compressed" bytes. The index goes through the reader's check first, as BundleReader does.
import Foundation
import FuzzSupport
@_spi(Core) import MDZCore
@testable import ManagedDocument
import SystemPackage

private let scratch = FuzzScratch("inflate")

@_cdecl("fuzz_inflate_main")
public func fuzzMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> Int32 {
    runFuzzer(argc, argv) { data, size in fuzzInflate(data ?? UnsafePointer(bitPattern: 1)!, size) }
}

func fuzzInflate(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    guard bytes.count > 8 else { return 0 }
    func u32(_ at: Int) -> UInt32 { bytes[at..<at + 4].reduce(0) { $0 << 8 | UInt32($1) } }
    let interval = Int64(ParallelInflater.minInterval) << Int64(bytes[0] % 3)
    let declared = UInt64(u32(1) % (4 << 20)) + 1
    let count = Int((declared + UInt64(interval) - 1) / UInt64(interval))
    let headerLength = 5 + 2 * count
    guard bytes.count > headerLength + 1 else { return 0 }
    let payload = Array(bytes[headerLength...])
    var offsets: [Int64] = [0]
    for index in 1..<count {
        let at = 5 + 2 * index
        offsets.append(offsets[index - 1] + Int64(UInt16(bytes[at]) << 8 | UInt16(bytes[at + 1])))
    }
    let restarts = DocumentMetadata.DeflateRestarts(interval: interval, offsets: offsets)
    guard ParallelInflater.check(restarts, size: declared, compressedSize: UInt64(payload.count)) == nil else { return 0 }
    let file = scratch.write(payload, named: "payload")
    guard let descriptor = try? FileDescriptor.open(file, .readOnly) else { return 0 }
    defer { try? descriptor.close() }
    guard let inflater = try? ParallelInflater(workers: 2, interval: interval) else { return 0 }
    var produced: UInt64 = 0
    _ = try? inflater.inflate(descriptor, dataOffset: 0, size: declared, compressedSize: UInt64(payload.count),
                              restarts: restarts) { chunk in
        produced += UInt64(chunk.count)
        if produced > declared { fatalError("the inflater gave more than the declared size") }
    }
    return 0
}
