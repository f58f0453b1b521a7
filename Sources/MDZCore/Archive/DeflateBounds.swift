#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// What a reader needs of how the writer deflates, without the deflater (the library's `ParallelDeflater`): the
/// smallest slice, the output that always holds a compressed slice, the most bytes a store of a given size can
/// deflate to (which readers check a bundle's declared sizes against), and the cores the process may use.
@_spi(Core) public enum DeflateBounds {
    /// The smallest slice of any engine: ``compressedBound(forSize:)`` and restart intervals are counted in these.
    @_spi(Core) public static let minimumSliceSize = 64 << 10

    /// The output space that always holds one compressed slice of `length` bytes, whatever the engine.
    @_spi(Core) public static func outputCapacity(forSlice length: Int) -> Int { length + length >> 8 + 1024 }

    /// The most bytes the writer's deflater can produce for `size` input bytes, whatever the engine (counted in the
    /// smallest slices, whose overheads add up to the most). Saturates at `Int64.max` (readers ask it of sizes a
    /// bundle declares).
    @_spi(Core) public static func compressedBound(forSize size: Int64) -> Int64 {
        let slice = Int64(minimumSliceSize)
        let slices = max(1, size / slice + (size % slice > 0 ? 1 : 0))
        let (bound, overflow) = slices.multipliedReportingOverflow(by: Int64(outputCapacity(forSlice: minimumSliceSize)))
        return overflow ? .max : bound
    }

    /// The number of cores this process may use (its CPU affinity and cgroup quota included).
    @_spi(Core) public static var availableCores: Int { max(1, ProcessInfo.processInfo.activeProcessorCount) }
}
