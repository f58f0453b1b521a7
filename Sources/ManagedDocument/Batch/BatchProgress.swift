#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
@_spi(Core) import MDZCore

/// A snapshot of a running batch, for progress displays.
public struct BatchProgress: Sendable {
    /// Items found by the walk so far (this shard's), and their source bytes.
    public var found = 0
    /// Source bytes of the items found so far.
    public var foundBytes: Int64 = 0
    /// Items finished, and their source bytes.
    public var done = 0
    /// Source bytes of the items finished so far.
    public var doneBytes: Int64 = 0
    /// Whether the walk has finished (``found`` is then the total).
    public var walkFinished = false
    /// Items and source bytes counted by the survey, a second walk that only classifies (when
    /// ``BatchOptions/survey`` is on): the total is known long before the conversions reach the end of the tree.
    public var surveyed = 0
    /// Source bytes of the items the survey counted so far.
    public var surveyedBytes: Int64 = 0
    /// Whether the survey has finished (``surveyed`` is then an estimate of the total).
    public var surveyFinished = false
    /// When the run started.
    public var startedAt = Date()

    /// A total of items and their source bytes, final (the walk's) or an estimate (the survey's).
    public struct Total: Sendable, Equatable {
        /// Items.
        public var items: Int
        /// Their source bytes.
        public var bytes: Int64
        /// Whether the walk counted it (otherwise the survey estimated it).
        public var isFinal: Bool
    }

    /// The best known total of items and bytes, and whether it is final (the walk) or an estimate (the survey);
    /// `nil` while neither has finished.
    public var total: Total? {
        if walkFinished { return Total(items: found, bytes: foundBytes, isFinal: true) }
        if surveyFinished {
            return Total(items: max(surveyed, found), bytes: max(surveyedBytes, foundBytes), isFinal: false)
        }
        return nil
    }
}

extension BatchProgress {
    /// Counts an item the walk found, with its source bytes.
    mutating func countFound(bytes: Int64) {
        found += 1
        foundBytes = foundBytes.addingSaturated(bytes)
    }

    /// Counts an item the survey found, with its source bytes.
    mutating func countSurveyed(bytes: Int64) {
        surveyed += 1
        surveyedBytes = surveyedBytes.addingSaturated(bytes)
    }

    /// Counts an item finished, with its source bytes.
    mutating func countDone(bytes: Int64) {
        done += 1
        doneBytes = doneBytes.addingSaturated(bytes)
    }
}
