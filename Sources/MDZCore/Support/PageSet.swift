/// A set of page numbers (non-negative) kept as bitmaps of 4,096 pages each, made only where a page is: the pages of
/// a writable working copy's overlay (FORMAT.md 16.2). A store of 1 GiB in 4 KiB pages, every page present, takes
/// 64 bitmaps of 512 bytes, where a `Set<Int64>` took about 8 MiB; a few scattered pages take a bitmap each, so the
/// memory never exceeds what a `Set` of the same pages would take by more than a bitmap per page named.
@_spi(Core) public struct PageSet: Sendable, Equatable {
    @_spi(Core) public init() {}

    /// Pages per bitmap: 64 words of 64 bits.
    private static let pagesPerChunk: Int64 = 4096
    private static let wordsPerChunk = Int(pagesPerChunk / 64)

    /// Bitmap `key` holds pages `key × 4096` to `key × 4096 + 4095`, bit `page % 64` of word `page % 4096 / 64`.
    private var chunks: [Int64: [UInt64]] = [:]
    /// How many pages are in the set.
    @_spi(Core) public private(set) var count = 0

    @_spi(Core) public var isEmpty: Bool { count == 0 }

    @_spi(Core) public func contains(_ page: Int64) -> Bool {
        guard page >= 0, let words = chunks[page / Self.pagesPerChunk] else { return false }
        let bit = page % Self.pagesPerChunk
        return words[Int(bit / 64)] & (1 << UInt64(bit % 64)) != 0
    }

    /// Adds `page` (non-negative); returns whether it was not in the set before.
    @discardableResult
    @_spi(Core) public mutating func insert(_ page: Int64) -> Bool {
        precondition(page >= 0, "a page number is never negative")
        let bit = page % Self.pagesPerChunk
        let mask: UInt64 = 1 << UInt64(bit % 64)
        let word = Int(bit / 64)
        let inserted = chunks[page / Self.pagesPerChunk, default: Array(repeating: 0, count: Self.wordsPerChunk)]
            .withUnsafeMutableBufferPointer { words -> Bool in
                guard words[word] & mask == 0 else { return false }
                words[word] |= mask
                return true
            }
        if inserted { count += 1 }
        return inserted
    }

    @_spi(Core) public mutating func formUnion<Pages: Sequence<Int64>>(_ pages: Pages) {
        for page in pages { insert(page) }
    }

    /// Removes every page at or past `limit`.
    @_spi(Core) public mutating func removeAll(from limit: Int64) {
        let limit = max(0, limit)
        for key in chunks.keys where key >= limit / Self.pagesPerChunk {
            var words = chunks[key]!
            for index in words.indices {
                // > The bits of this word below `limit` stay: none, some, or all 64.
                let kept = min(64, max(0, limit - (key * Self.pagesPerChunk + Int64(index * 64))))
                let mask: UInt64 = kept == 64 ? ~0 : (1 << UInt64(kept)) - 1
                count -= (words[index] & ~mask).nonzeroBitCount
                words[index] &= mask
            }
            chunks[key] = words.allSatisfy { $0 == 0 } ? nil : words
        }
    }

    /// Calls `body` with each page, in ascending order.
    @_spi(Core) public func forEach(_ body: (Int64) throws -> Void) rethrows {
        for key in chunks.keys.sorted() {
            let start = key * Self.pagesPerChunk
            for (index, word) in chunks[key]!.enumerated() where word != 0 {
                var bits = word
                while bits != 0 {
                    try body(start + Int64(index * 64 + bits.trailingZeroBitCount))
                    bits &= bits - 1
                }
            }
        }
    }
}
