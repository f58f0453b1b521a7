// The fleet's files, untrusted: a batch plan (a file any worker reads), a shard's report (what merge-reports and the
// next run of the shard read) and a report's spool (what the next run salvages). One input is tried as each.
import Foundation
import FuzzSupport
import SystemPackage
@_spi(Core) import MDZCore
@testable import ManagedDocument

private let scratch = FuzzScratch("fleet")

@_cdecl("fuzz_fleet_main")
public func fuzzMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> Int32 {
    runFuzzer(argc, argv) { data, size in fuzzFleet(data ?? UnsafePointer(bitPattern: 1)!, size) }
}

func fuzzFleet(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    // As a plan: a plan that opens for the whole tree holds exactly the items its header counts, each inside the root.
    let plan = scratch.write(bytes, named: "input.plan")
    if let whole = try? BatchPlan(at: plan) {
        guard whole.shareItems == whole.header.items else { fatalError("a plan's whole share is not its items") }
        var seen = 0
        try? whole.forEachItem { item in
            guard BatchPlan.isInsideRoot(item.source) else { fatalError("a plan item outside the root was accepted") }
            seen += 1
            return true
        }
        guard seen == whole.shareItems else { fatalError("a plan's items were not all visited") }
        _ = try? BatchPlan(at: plan, shard: try! BatchShard(index: 1, count: 3))
    }
    // As a shard's report beside another: the merge never traps, whatever the numbers.
    let folder = scratch.folder.appending("reports")
    try? FileManager.default.createDirectory(atPath: folder.string, withIntermediateDirectories: true)
    _ = scratch.write(bytes, named: "reports/shard-0.json")
    if let merger = try? BatchReportMerger(folder: folder) { _ = try? merger.write(to: nil) }
    // As a spool: salvage's reading never traps.
    let spool = scratch.write(bytes, named: "input.spool")
    if let descriptor = try? FileDescriptor.open(spool, .readOnly) {
        _ = try? BatchReportSpool.items(in: descriptor, path: spool)
        try? descriptor.close()
    }
    return 0
}
