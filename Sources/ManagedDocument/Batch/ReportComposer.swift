import Foundation
import SystemPackage
@_spi(Core) import MDZCore

/// Writes a shard's report from this run's items (a spool, in the order they finished) merged into the report
/// earlier runs left, in bounded memory: the spool's items are sorted in runs of at most ``SortedItems/chunkBytes``
/// kept in unnamed files, then merged with the earlier report (read as a stream, its items sorted) straight into the
/// new file. Memory holds one chunk while sorting and one item per run while merging, whatever the shard's size.
enum ReportComposer {
    /// The report at `path`: `run`'s header (its `items` ignored) and `attempt`, `items` merged into `previous`
    /// (an item an earlier run converted stays `converted`; otherwise this run's entry wins); written aside, flushed
    /// and renamed into place.
    ///
    /// - Returns: the report's header as written (its `items` empty), with the recounted summary.
    static func write(run: BatchReport, as attempt: BatchReport.Attempt, items: SortedItems,
                      previous: ReportCursor?, to path: FilePath) throws -> BatchReport {
        var header = run
        header.items = []
        var earlier: [BatchReport.Attempt] = []
        if let previous = previous?.header {
            header.startedAt = min(previous.startedAt, run.startedAt)
            earlier = previous.recordedAttempts
        }
        header.attempts = earlier + [attempt]
        let file = try AtomicFile(target: path, replacing: true, removingStale: false)
        do {
            let output = BufferedOutput(file.descriptor, path: file.temporaryPath)
            let (prefix, _) = try split(header)
            try output.write(prefix + Data("\"items\":[".utf8))
            var totals = try merge(items.cursors(), previous: previous, into: output)
            totals.duration = header.attempts!.reduce(0) { $0 + $1.summary.duration }
            totals.interrupted = run.summary.interrupted
            header.summary = totals
            let (_, suffix) = try split(header)
            try output.write(Data((totals.items == 0 ? "]" : "\n]").utf8) + suffix + Data("\n".utf8))
            try output.flush()
            try file.commit()
        } catch {
            file.discard()
            throw error
        }
        return header
    }

    /// A header's bytes before `"items":[]` (the signature first) and after it.
    private static func split(_ header: BatchReport) throws -> (Data, Data) {
        let data = try BatchReport.encoder.encode(header)
        guard data.first == UInt8(ascii: "{"), let items = data.range(of: Data("\"items\":[]".utf8)) else {
            throw DocumentError(.ioFailure, path: FilePath(header.root), reason: "the report could not be encoded")
        }
        let prefix = Data(BatchReport.signature.utf8) + Data("\(BatchReport.formatVersion),".utf8)
            + data[data.index(after: data.startIndex)..<items.lowerBound]
        return (prefix, Data(data[items.upperBound...]))
    }

    /// Merges the sorted runs of this run's items with the earlier report's, writing each kept item; returns the
    /// totals of the items written.
    private static func merge(_ runs: [ItemRunCursor], previous: ReportCursor?, into output: BufferedOutput) throws -> BatchSummary {
        var heap = SourceHeap()
        // Index 0 is the earlier report; 1… are this run's sorted runs.
        if let previous, let item = try previous.next() { heap.push(item, from: 0) }
        for (index, run) in runs.enumerated() {
            if let item = try run.next() { heap.push(item, from: index + 1) }
        }
        func advance(_ report: Int) throws {
            let next = report == 0 ? try previous?.next() : try runs[report - 1].next()
            if let next { heap.push(next, from: report) }
        }
        var totals = BatchSummary()
        while let head = heap.pop() {
            var earlier: BatchItem?, current: BatchItem?
            var entry: (item: BatchItem, report: Int)? = head
            while let found = entry {
                if found.report == 0 {
                    earlier = found.item
                } else if current == nil || found.item.outcome == .converted {
                    current = found.item
                }
                try advance(found.report)
                entry = heap.peek().flatMap { $0.item.source == head.item.source ? heap.pop() : nil }
            }
            let kept = current.map { BatchReport.kept(earlier: earlier, later: $0) } ?? earlier!
            try output.write(Data((totals.items == 0 ? "\n" : ",\n").utf8) + (try BatchReport.encoder.encode(kept)))
            totals.add(kept)
        }
        return totals
    }
}

/// Items sorted by source in bounded memory: lines added in any order are sorted in chunks of at most
/// ``chunkBytes``, each written to an unnamed file as a sorted run.
final class SortedItems {
    static let chunkBytes = 8 << 20
    private var chunk: [(source: String, line: Data)] = []
    private var chunkSize = 0
    private var runs: [FileDescriptor] = []
    /// The items added, counted.
    private(set) var summary = BatchSummary()

    init() {}

    deinit { for run in runs { try? run.close() } }  // Squash close error of unnamed scratch files.

    /// Adds an item's JSON line.
    func add(_ item: BatchItem, line: Data) throws {
        chunk.append((item.source, line))
        chunkSize += line.count + item.source.utf8.count
        summary.add(item)
        if chunkSize >= Self.chunkBytes { try flush() }
    }

    /// Readers of the sorted runs, each from its start.
    func cursors() throws -> [ItemRunCursor] {
        try flush()
        return runs.map { ItemRunCursor($0) }
    }

    private func flush() throws {
        guard !chunk.isEmpty else { return }
        chunk.sort { $0.source < $1.source }
        let descriptor = try FileSystem.unnamedTemporaryFile()
        runs.append(descriptor)
        let output = BufferedOutput(descriptor, path: "<temporary>")
        for entry in chunk { try output.write(entry.line + Data("\n".utf8)) }
        try output.flush()
        chunk.removeAll()
        chunkSize = 0
    }
}

/// One sorted run's items, in order.
final class ItemRunCursor {
    private var lines: LineReader

    init(_ descriptor: FileDescriptor) {
        lines = LineReader(descriptor, path: "<temporary>", maxLineLength: ReportCursor.maxLineLength)
    }

    func next() throws -> BatchItem? {
        guard let line = try lines.next() else { return nil }
        return try BatchPlan.decoder.decode(BatchItem.self, from: Data(line.bytes))
    }
}

/// Writes to a descriptor from its start through a 1 MiB buffer.
final class BufferedOutput {
    private let descriptor: FileDescriptor
    private let path: FilePath
    private var buffer = Data()
    private(set) var written: Int64 = 0

    init(_ descriptor: FileDescriptor, path: FilePath) {
        self.descriptor = descriptor
        self.path = path
    }

    func write(_ data: Data) throws {
        buffer += data
        if buffer.count >= 1 << 20 { try flush() }
    }

    func flush() throws {
        try buffer.withUnsafeBytes { bytes in
            try FileSystem.write(descriptor, bytes, at: written, path: path)
        }
        written += Int64(buffer.count)
        buffer.removeAll(keepingCapacity: true)
    }
}
