import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

/// ``PageSet``, the overlay's pages as bitmaps, against a `Set<Int64>` given the same random operations.
@Suite("The overlay's page sets: bitmaps that behave as a set")
struct PageSetTests {
    /// The pages `forEach` gives, in its order.
    static func inOrder(_ pages: PageSet) -> [Int64] {
        var found: [Int64] = []
        pages.forEach { found.append($0) }
        return found
    }

    @Test("5,000 random inserts, lookups and cuts, dense and scattered: the same answers as a Set, in order")
    func randomOperations() {
        var generator = SeededGenerator(seed: 20261126)
        var pages = PageSet()
        var model = Set<Int64>()
        for step in 0..<5_000 {
            // > Dense near the start (a store's pages), scattered far out (a store grown, then cut).
            let page = generator.next() % 4 == 0 ? Int64(generator.next() % 50_000_000)
                                                 : Int64(generator.next() % 20_000)
            switch generator.next() % 10 {
            case 0:
                let limit = Int64(generator.next() % 25_000)
                pages.removeAll(from: limit)
                model = model.filter { $0 < limit }
            case 1...6:
                #expect(pages.insert(page) == model.insert(page).inserted, "step \(step): insert \(page)")
            default:
                #expect(pages.contains(page) == model.contains(page), "step \(step): contains \(page)")
            }
            #expect(pages.count == model.count, "step \(step)")
        }
        #expect(Self.inOrder(pages) == model.sorted())
        var rebuilt = PageSet()
        rebuilt.formUnion(model.shuffled(using: &generator))
        #expect(rebuilt == pages)
        #expect(!pages.contains(-1))
        pages.removeAll(from: 0)
        #expect(pages.isEmpty && Self.inOrder(pages).isEmpty && pages == PageSet())
    }

    @Test("every page of a 1 GiB store in 4 KiB pages: all found, in order, at chunk edges too")
    func dense() {
        var pages = PageSet()
        for page in Int64(0)..<262_144 { pages.insert(page) }
        #expect(pages.count == 262_144)
        #expect(pages.contains(4095) && pages.contains(4096) && pages.contains(262_143) && !pages.contains(262_144))
        var expected: Int64 = 0
        var inOrder = true
        pages.forEach { page in
            inOrder = inOrder && page == expected
            expected += 1
        }
        #expect(inOrder && expected == 262_144)
        pages.removeAll(from: 4097)
        #expect(pages.count == 4097 && pages.contains(4096) && !pages.contains(4097))
        #expect(Self.inOrder(pages) == Array(0...4096))
        pages.removeAll(from: 100)
        #expect(Self.inOrder(pages) == Array(0..<100))
    }
}
