@_spi(Core) import MDZCore
/// Counts and totals of a batch run.
public struct BatchSummary: Sendable, Codable, Equatable {
    /// Items per outcome (every outcome present, zero included); a report writes it as an object keyed by the
    /// outcomes' words.
    public var outcomes: [BatchItem.Outcome: Int] = Dictionary(uniqueKeysWithValues: BatchItem.Outcome.allCases.map { ($0, 0) })
    /// Items reported.
    public var items = 0
    /// Bytes of the items' source files.
    public var bytesIn: Int64 = 0
    /// Bytes of the bundles written or found.
    public var bytesOut: Int64 = 0
    /// Seconds, whole run.
    public var duration: Double = 0
    /// Stopped early (SIGINT/SIGTERM): items not started are not in the report; run again to finish.
    public var interrupted = false

    /// An empty summary: no item, every outcome counted zero.
    public init() {}

    /// The number of items with this outcome.
    public func count(_ outcome: BatchItem.Outcome) -> Int { outcomes[outcome] ?? 0 }

    /// Whether anything failed or was busy.
    public var hasProblems: Bool { count(.failed) + count(.busy) > 0 }

    /// Counts an item. The sizes add up without trapping, whatever a report read from disk claims: a total past
    /// `Int64.max` stays there.
    mutating func add(_ item: BatchItem) {
        outcomes[item.outcome, default: 0] += 1
        items += 1
        bytesIn = bytesIn.addingSaturated(item.bytesIn)
        bytesOut = bytesOut.addingSaturated(item.bytesOut)
    }
}

extension Int64 {
    /// `self + value` for byte counts that may come from a file: a negative value counts nothing, and a total past
    /// `Int64.max` stays there instead of trapping.
    func addingSaturated(_ value: Int64) -> Int64 {
        let (result, overflow) = addingReportingOverflow(Swift.max(0, value))
        return overflow ? .max : result
    }
}
