/// A set of page numbers (non-negative) kept as bitmaps of 4,096 pages each, made only where a page is: the pages of
/// a writable working copy's overlay (FORMAT.md 16.2). A store of 1 GiB in 4 KiB pages, every page present, takes
/// 64 bitmaps of 512 bytes, where a `Set<Int64>` took about 8 MiB; a few scattered pages take a bitmap each, so the
/// memory never exceeds what a `Set` of the same pages would take by more than a bitmap per page named.
struct PageSet: Sendable, Equatable {
    /// Pages per bitmap: 64 words of 64 bits.
    private static let pagesPerChunk: Int64 = 4096
    private static let wordsPerChunk = Int(pagesPerChunk / 64)

    /// Bitmap `key` holds pages `key × 4096` to `key × 4096 + 4095`, bit `page % 64` of word `page % 4096 / 64`.
    private var chunks: [Int64: [UInt64]] = [:]
    /// How many pages are in the set.
    private(set) var count = 0

    init() {}

    /// A set of `pages` (each non-negative).
    init<Pages: Sequence<Int64>>(_ pages: Pages) {
        formUnion(pages)
    }

    var isEmpty: Bool { count == 0 }

    func contains(_ page: Int64) -> Bool {
        guard page >= 0, let words = chunks[page / Self.pagesPerChunk] else { return false }
        let bit = page % Self.pagesPerChunk
        return words[Int(bit / 64)] & (1 << UInt64(bit % 64)) != 0
    }

    /// Adds `page` (non-negative); returns whether it was not in the set before.
    @discardableResult
    mutating func insert(_ page: Int64) -> Bool {
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

    mutating func formUnion<Pages: Sequence<Int64>>(_ pages: Pages) {
        for page in pages { insert(page) }
    }

    /// Removes every page at or past `limit`.
    mutating func removeAll(from limit: Int64) {
        let first = max(0, limit) / Self.pagesPerChunk
        for key in chunks.keys where key >= first {
            let words = chunks[key]!
            let start = key * Self.pagesPerChunk
            var kept = words
            for word in words.indices {
                for bit in 0..<64 where words[word] & (1 << UInt64(bit)) != 0 {
                    if start + Int64(word * 64 + bit) >= limit {
                        kept[word] &= ~(1 << UInt64(bit))
                        count -= 1
                    }
                }
            }
            chunks[key] = kept.allSatisfy { $0 == 0 } ? nil : kept
        }
    }

    /// Calls `body` with each page, in ascending order.
    func forEach(_ body: (Int64) throws -> Void) rethrows {
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

    /// The pages in ascending order.
    var sorted: [Int64] {
        var pages: [Int64] = []
        pages.reserveCapacity(count)
        forEach { pages.append($0) }
        return pages
    }
}
