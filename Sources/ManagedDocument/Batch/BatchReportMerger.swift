#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SystemPackage
@_spi(Core) import MDZCore

/// Merges the shard reports of a fleet (`docconvert batch --report`, one per shard) into one report, streaming:
/// the reports' items are read one line at a time and merged in order of their source (each report's items are
/// sorted), so memory holds one item per report whatever the number of items (`docconvert merge-reports`).
///
/// The rules: every report must say it is a shard of the same number N (else the reports disagree); an item in two
/// reports (two report files for one shard, e.g. an array submitted once as 0-15 and once as 1-16) is listed under
/// `duplicates` and its `converted` entry is kept, else the entry of the report that finished last; an item converted
/// in two reports means two workers worked outside the document locks, and the reports disagree. Shards with no
/// report, interrupted runs, a run killed before it wrote its report (its spool is still beside the report), failed
/// and busy items leave the tree unfinished.
///
/// ```swift
/// let merge = try BatchReportMerger(folder: "/srv/home/.docconvert-reports", expectedShards: 16)
/// let result = try merge.write(to: FileDescriptor.standardOutput)
/// for line in result.messages { print(line) }
/// ```
public struct BatchReportMerger: Sendable {
    /// How the merged tree stands; the value is `docconvert merge-reports`'s exit status.
    public enum Status: Int32, Sendable, Codable {
        /// Every shard reported, nothing failed, busy, interrupted or killed.
        case finished = 0
        /// A shard is missing, was interrupted or killed, or items failed or were busy: rerun those shards.
        case unfinished = 1
        /// The reports disagree (shard counts, the expected count, an item converted twice): a person must look.
        case disagreement = 65
    }

    /// One report in the folder.
    public struct Report: Sendable, Codable, Equatable {
        /// Its file name.
        public var file: String
        /// `K/N`.
        public var shard: String
        /// Where its shard came from (`--shard`, `SLURM_ARRAY_TASK_ID`, …).
        public var origin: String
        /// Runs recorded in it.
        public var attempts: Int
        /// Runs recorded in it that were killed before they wrote a report (salvaged by a later run).
        public var killedAttempts: Int
        /// When its latest run finished.
        public var finishedAt: Date?
        /// Whether its latest run was interrupted.
        public var interrupted: Bool
    }

    /// What a merge found.
    public struct Result: Sendable {
        /// How the tree stands.
        public var status: Status
        /// Lines for the operator, in words (what is missing, what disagrees, what to do).
        public var messages: [String]
        /// The totals over the merged items.
        public var summary: BatchSummary
        /// The number of shards, when the reports agree on it.
        public var shardCount: Int?
        /// The reports merged.
        public var reports: [Report]
        /// Shards with no report.
        public var missingShards: [Int]
        /// Items found in more than one report.
        public var duplicates: Int
        /// Items converted in more than one report.
        public var convertedTwice: Int
        /// Spools of runs killed before they wrote their report, not yet salvaged by a rerun of their shard.
        public var killedRuns: [String]
    }

    /// The folder of reports.
    public let folder: FilePath
    /// The number of shards the caller expects, when it knows it.
    public let expectedShards: Int?
    /// The report files found, sorted by name.
    public let files: [FilePath]

    /// Finds the reports in `folder`: files named `*.json` that start with ``BatchReport/signature``, and any
    /// `shard-*.json`; a merged report (written there by an earlier merge) is left out.
    ///
    /// - Throws: ``DocumentError/Code/notFound`` when the folder does not exist or holds no report.
    public init(folder: FilePath, expectedShards: Int? = nil) throws {
        self.folder = folder
        self.expectedShards = expectedShards
        guard FileSystem.isDirectory(folder) else {
            throw DocumentError(.notFound, path: folder, reason: "is not a folder")
        }
        // > A merged report written beside the shards' (it starts with the same signature) is not a shard's.
        let merged = Array("\(BatchReport.signature)\(BatchReport.formatVersion),\"merged\":true".utf8)
        files = try FileSystem.contentsOfDirectory(folder).sorted().filter { name in
            guard name.hasSuffix(".json"), !name.hasPrefix(".") else { return false }
            let prefix = FileSystem.prefix(of: folder.appending(name), count: merged.count) ?? []
            if prefix == merged { return false }
            return name.hasPrefix("shard-") || prefix.starts(with: Array(BatchReport.signature.utf8))
        }.map { folder.appending($0) }
        guard !files.isEmpty else {
            let killed = Self.killedRuns(in: folder)
            throw DocumentError(.notFound, path: folder, reason: killed.isEmpty ? "holds no batch report"
                : "holds no batch report, only the spool of a run killed before it wrote its report (\(killed.joined(separator: ", "))): run its shard again")
        }
    }

    /// Merges the reports and writes the merged report (JSON, one item per line) to `output`; nothing is written
    /// when the reports disagree.
    ///
    /// - Throws: ``DocumentError/Code/invalidMetadata`` when a file is not a report or its items are out of order
    ///   (not written by `docconvert batch --report`); ``DocumentError/Code/ioFailure`` when a file cannot be read
    ///   or the output cannot be written.
    public func write(to output: FileDescriptor?) throws -> Result {
        let cursors = try files.map { try ReportCursor(path: $0) }
        let headers = cursors.map(\.header)
        var result = Result(status: .finished, messages: [], summary: BatchSummary(), shardCount: nil,
                            reports: zip(files, headers).map { Self.report($0, $1) }, missingShards: [],
                            duplicates: 0, convertedTwice: 0, killedRuns: [])
        let counts = Set(headers.map(\.shard.count)).sorted()
        guard counts.count == 1, let count = counts.first else {
            result.status = .disagreement
            result.messages = ["the reports disagree on the number of shards:"]
                + result.reports.map { "  \($0.file): shard \($0.shard) (from \($0.origin))" }
                + ["a task rerun alone must be given the original array's size (--shard-count); remove the stray reports and rerun"]
            return result
        }
        result.shardCount = count
        if let expectedShards, expectedShards != count {
            result.status = .disagreement
            result.messages = ["the reports are shards of \(count), not of \(expectedShards)"]
            return result
        }
        let staging = try MergedOutput(headers: headers, reports: result.reports, shardCount: count)
        let merged = try mergeItems(cursors, finishedAt: headers.map(\.finishedAt), into: staging)
        result.summary = merged.summary
        result.duplicates = merged.duplicates
        result.convertedTwice = merged.convertedTwice.count
        result.missingShards = Array(Set(0..<count).subtracting(headers.map(\.shard.index))).sorted()
        result.killedRuns = Self.killedRuns(in: folder)
        if !merged.convertedTwice.isEmpty {
            result.status = .disagreement
            result.messages = ["items converted twice (two workers outside the document locks?):"]
                + merged.convertedTwice.prefix(100).map { "  \($0)" }
                + (merged.convertedTwice.count > 100 ? ["  … and \(merged.convertedTwice.count - 100) more"] : [])
            return result
        }
        judge(&result)
        if let output { try staging.finish(missingShards: result.missingShards, summary: result.summary, to: output) }
        return result
    }

    /// Merges the reports into a file at `path`, written aside, flushed and renamed into place; nothing is written
    /// (and a file already there is unchanged) when the reports disagree.
    public func write(toFileAt path: FilePath) throws -> Result {
        let file = try AtomicFile(target: path, replacing: true)
        do {
            let result = try write(to: file.descriptor)
            if result.status == .disagreement { file.discard() } else { try file.commit() }
            return result
        } catch {
            file.discard()
            throw error
        }
    }

    /// Sets the status and the messages of a merge whose reports agree.
    private func judge(_ result: inout Result) {
        let count = result.shardCount ?? 0
        if !result.missingShards.isEmpty {
            let missing = result.missingShards.map(String.init).joined(separator: ", ")
            result.messages.append("no report from shard(s) \(missing) of \(count): run them (e.g. sbatch --array=\(result.missingShards.map(String.init).joined(separator: ",")) …)")
            result.status = .unfinished
        }
        if result.duplicates > 0 {
            result.messages.append("\(result.duplicates) item(s) are in two reports (see .duplicates); the converted or latest entry is kept")
        }
        if !result.killedRuns.isEmpty {
            result.messages.append("a run was killed before it wrote its report (\(result.killedRuns.joined(separator: ", "))): run its shard again; the rerun adds what it recorded to the report")
            result.status = .unfinished
        }
        if result.summary.interrupted {
            result.messages.append("a shard was interrupted: run it again")
            result.status = .unfinished
        }
        if result.summary.hasProblems {
            result.messages.append("some items failed or were busy: see .items[] | select(.outcome == \"failed\" or .outcome == \"busy\")")
            result.status = .unfinished
        }
    }

    private static func report(_ path: FilePath, _ header: BatchReport) -> Report {
        Report(file: path.lastComponent?.string ?? path.string, shard: header.shard.description,
               origin: header.shard.origin, attempts: header.recordedAttempts.count,
               killedAttempts: header.recordedAttempts.filter { $0.killed == true }.count,
               finishedAt: header.finishedAt, interrupted: header.summary.interrupted)
    }

    /// The spools in the folder of runs that died before writing their report (unlocked, starting with the spool's
    /// signature): their shard must run again, which salvages them.
    private static func killedRuns(in folder: FilePath) -> [String] {
        guard let names = try? FileSystem.contentsOfDirectory(folder) else { return [] }
        return names.sorted().filter { name in
            name.hasPrefix(".") && name.hasSuffix(BatchReportSpool.suffix)
                && BatchReportSpool.isAbandoned(folder.appending(name))
        }
    }

    // MARK: Merging

    private struct Merged {
        var summary = BatchSummary()
        var duplicates = 0
        var convertedTwice: [String] = []
    }

    /// The k-way merge: the reports' items in order of their source, one group per source.
    private func mergeItems(_ cursors: [ReportCursor], finishedAt: [Date?], into staging: MergedOutput) throws -> Merged {
        var heap = SourceHeap()
        for index in cursors.indices {
            if let item = try cursors[index].next() { heap.push(item, from: index) }
        }
        var merged = Merged()
        var interrupted = false
        while let head = heap.pop() {
            let first = head.item
            var group = [head]
            if let next = try cursors[head.report].next() { heap.push(next, from: head.report) }
            while let top = heap.peek(), top.item.source == first.source {
                _ = heap.pop()
                group.append(top)
                if let next = try cursors[top.report].next() { heap.push(next, from: top.report) }
            }
            group.sort { $0.report < $1.report }
            let chosen = Self.choose(group, finishedAt: finishedAt)
            merged.summary.add(chosen)
            try staging.addItem(chosen)
            if group.count > 1 {
                merged.duplicates += 1
                try staging.addDuplicate(source: first.source, reports: group.map { files[$0.report].lastComponent?.string ?? "" },
                                         outcomes: group.map(\.item.outcome))
                if group.filter({ $0.item.outcome == .converted }).count > 1 {
                    if merged.convertedTwice.count < 1_000 { merged.convertedTwice.append(first.source) }
                    try staging.addConvertedTwice(first.source)
                }
            }
        }
        for cursor in cursors where cursor.header.summary.interrupted { interrupted = true }
        merged.summary.interrupted = interrupted
        return merged
    }

    /// The entry kept for an item several reports hold: the first `converted` one, else the one of the report that
    /// finished last (the later file on a tie).
    private static func choose(_ group: [(item: BatchItem, report: Int)], finishedAt: [Date?]) -> BatchItem {
        if let converted = group.first(where: { $0.item.outcome == .converted }) { return converted.item }
        var best = group[0]
        for entry in group.dropFirst() {
            let time = finishedAt[entry.report] ?? .distantPast, bestTime = finishedAt[best.report] ?? .distantPast
            if time >= bestTime { best = entry }
        }
        return best.item
    }
}

/// A min-heap of the reports' current items, by source, then report.
struct SourceHeap {
    private var entries: [(item: BatchItem, report: Int)] = []

    private static func less(_ a: (item: BatchItem, report: Int), _ b: (item: BatchItem, report: Int)) -> Bool {
        a.item.source != b.item.source ? a.item.source < b.item.source : a.report < b.report
    }

    func peek() -> (item: BatchItem, report: Int)? { entries.first }

    mutating func push(_ item: BatchItem, from report: Int) {
        entries.append((item, report))
        var child = entries.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard Self.less(entries[child], entries[parent]) else { break }
            entries.swapAt(child, parent)
            child = parent
        }
    }

    mutating func pop() -> (item: BatchItem, report: Int)? {
        guard !entries.isEmpty else { return nil }
        entries.swapAt(0, entries.count - 1)
        let top = entries.removeLast()
        var parent = 0
        while true {
            let left = 2 * parent + 1, right = left + 1
            var smallest = parent
            if left < entries.count, Self.less(entries[left], entries[smallest]) { smallest = left }
            if right < entries.count, Self.less(entries[right], entries[smallest]) { smallest = right }
            guard smallest != parent else { break }
            entries.swapAt(parent, smallest)
            parent = smallest
        }
        return top
    }
}
