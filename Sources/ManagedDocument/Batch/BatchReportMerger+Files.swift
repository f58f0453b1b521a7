#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SystemPackage
@_spi(Core) import MDZCore

/// One report's items, read one line at a time in order of their source.
///
/// A report written by `docconvert batch --report` (``BatchReport/encoded()``) has its header up to `"items":[` on
/// its first line, one item per line sorted by source, and the rest of its fields on its last line: the header is read
/// from those two lines, the items as they are needed. Any other report (a `--json` stream, whose items are in the
/// order they finished; a report reformatted by another tool) is read whole and sorted, up to
/// ``maxUnsortedReportSize``.
final class ReportCursor {
    /// The largest report read whole.
    static let maxUnsortedReportSize: Int64 = 256 << 20
    /// The longest header line (a report's attempts are on it) and the longest item line.
    static let maxLineLength = 16 << 20

    let path: FilePath
    let header: BatchReport
    private let descriptor: FileDescriptor
    private var lines: LineReader?
    private var sorted: [BatchItem] = []
    private var position = 0
    private var previous: String?

    init(path: FilePath) throws {
        self.path = path
        descriptor = try FileSystem.openForReading(path)
        do {
            var lines = LineReader(descriptor, path: path, maxLineLength: Self.maxLineLength)
            guard let first = try lines.next(), first.bytes.starts(with: Array(BatchReport.signature.utf8)) else {
                throw Self.notAReport(path, "it does not start with \(BatchReport.signature)")
            }
            if first.isTerminated, first.bytes.reversed().starts(with: Array("\"items\":[".utf8).reversed()),
               let tail = try Self.tail(of: descriptor, path: path) {
                let header = try Self.decode(Data(first.bytes) + tail, path: path)
                if header.attempts != nil {  // written by BatchReportFile: sorted
                    self.header = header
                    self.lines = lines
                    return
                }
            }
            var whole = try Self.readWhole(descriptor, path: path)
            whole.items.sort { $0.source < $1.source }
            sorted = whole.items
            whole.items = []
            header = whole
        } catch {
            try? descriptor.close()  // Squash close error of a read-only descriptor.
            throw error
        }
    }

    deinit { try? descriptor.close() }  // Squash close error of a read-only descriptor.

    /// The next item by source; `nil` after the last.
    ///
    /// - Throws: ``DocumentError/Code/invalidMetadata`` when an item cannot be read or is out of order.
    func next() throws -> BatchItem? {
        let item: BatchItem
        if lines != nil {
            guard let line = try lines!.next() else { throw Self.notAReport(path, "it ends inside its items") }
            if line.bytes.first == UInt8(ascii: "]") {
                lines = nil
                return nil
            }
            var bytes = line.bytes
            if bytes.last == UInt8(ascii: ",") { bytes = bytes.dropLast() }
            do {
                item = try BatchPlan.decoder.decode(BatchItem.self, from: Data(bytes))
            } catch {
                throw Self.notAReport(path, "the line at offset \(line.offset) is not an item (\(DocumentError.summary(of: error)))")
            }
        } else {
            guard position < sorted.count else { return nil }
            item = sorted[position]
            position += 1
        }
        guard item.bytesIn >= 0, item.bytesOut >= 0 else {
            throw Self.notAReport(path, "the item '\(item.source)' has a negative size")
        }
        if let previous, !(previous < item.source) {
            throw Self.notAReport(path, "its items are not sorted by source ('\(item.source)' after '\(previous)'): it was changed after docconvert wrote it")
        }
        previous = item.source
        return item
    }

    /// The report's last line, from its `]` on, when its items end with a line that starts with `]`.
    private static func tail(of descriptor: FileDescriptor, path: FilePath) throws -> Data? {
        let size = try descriptor.seek(offset: 0, from: .end)
        let count = Int(min(size, Int64(maxLineLength)))
        let bytes = try FileSystem.read(descriptor, at: size - Int64(count), count: count, path: path)
        guard let newline = bytes.indices.dropLast().last(where: { bytes[$0] == UInt8(ascii: "\n") && bytes[$0 + 1] == UInt8(ascii: "]") })
        else { return nil }
        return Data(bytes[(newline + 1)...])
    }

    private static func readWhole(_ descriptor: FileDescriptor, path: FilePath) throws -> BatchReport {
        let size = try descriptor.seek(offset: 0, from: .end)
        guard size <= maxUnsortedReportSize else {
            throw DocumentError(.limitExceeded, path: path,
                                reason: "is a report of \(size) bytes whose items are not one per line in order (a --json stream?); merge the --report files instead")
        }
        let bytes = try FileSystem.read(descriptor, at: 0, count: Int(size), path: path)
        return try decode(Data(bytes), path: path)
    }

    private static func decode(_ data: Data, path: FilePath) throws -> BatchReport {
        do {
            return try BatchPlan.decoder.decode(BatchReport.self, from: data)
        } catch {
            throw notAReport(path, DocumentError.summary(of: error))
        }
    }

    static func notAReport(_ path: FilePath, _ why: String) -> DocumentError {
        DocumentError(.invalidMetadata, path: path, reason: "is not a batch report written by docconvert (\(why))")
    }
}

/// The merged report as it is made: its parts staged in unnamed files (the items can be millions), then written out
/// in one go once the merge knows the reports agree.
final class MergedOutput {
    private let head: Data
    private let items: ScratchStream
    private let duplicates: ScratchStream
    private let convertedTwice: ScratchStream

    private struct Head: Encodable {
        var root: String
        var shardCount: Int
        var shardCounts: [Int]
        var shards: [Int]
        var reports: [BatchReportMerger.Report]
        var startedAt: Date?
        var finishedAt: Date?
    }

    private struct Duplicate: Encodable {
        var source: String
        var reports: [String]
        var outcomes: [BatchItem.Outcome]
    }

    /// The merged summary: the outcomes present, as a merged report counts them.
    private struct Summary: Encodable {
        var items: Int
        var outcomes: [BatchItem.Outcome: Int]
        var bytesIn: Int64
        var bytesOut: Int64
        var interrupted: Bool
    }

    init(headers: [BatchReport], reports: [BatchReportMerger.Report], shardCount: Int) throws {
        let latest = zip(headers.indices, headers).max { ($0.1.finishedAt ?? .distantPast, $0.0) < ($1.1.finishedAt ?? .distantPast, $1.0) }
        let fields = Head(root: latest?.1.root ?? "", shardCount: shardCount, shardCounts: [shardCount],
                          shards: Array(Set(headers.map(\.shard.index))).sorted(), reports: reports,
                          startedAt: headers.map(\.startedAt).min(), finishedAt: headers.compactMap(\.finishedAt).max())
        let encoded = try BatchReport.encoder.encode(fields)
        head = Data("{\"\(BatchReport.formatKey)\":\(BatchReport.formatVersion),\"merged\":true,".utf8) + encoded.dropFirst().dropLast()
        items = try ScratchStream()
        duplicates = try ScratchStream()
        convertedTwice = try ScratchStream()
    }

    func addItem(_ item: BatchItem) throws { try items.appendElement(try BatchReport.encoder.encode(item)) }

    func addDuplicate(source: String, reports: [String], outcomes: [BatchItem.Outcome]) throws {
        try duplicates.appendElement(try BatchReport.encoder.encode(Duplicate(source: source, reports: reports, outcomes: outcomes)))
    }

    func addConvertedTwice(_ source: String) throws {
        try convertedTwice.appendElement(try BatchReport.encoder.encode(source))
    }

    /// Writes the merged report to `output`.
    func finish(missingShards: [Int], summary: BatchSummary, to output: FileDescriptor) throws {
        let outcomes = summary.outcomes.filter { $0.value > 0 }
        let totals = Summary(items: summary.items, outcomes: outcomes, bytesIn: summary.bytesIn, bytesOut: summary.bytesOut,
                             interrupted: summary.interrupted)
        let path = FilePath("<output>")
        func write(_ data: Data) throws { try data.withUnsafeBytes { try FileSystem.writeAll(output, $0, path: path) } }
        try write(head + Data(",\"items\":[".utf8))
        try items.copy(to: output)
        try write(Data("],\"duplicates\":[".utf8))
        try duplicates.copy(to: output)
        try write(Data("],\"convertedTwice\":[".utf8))
        try convertedTwice.copy(to: output)
        try write(Data("],\"missingShards\":".utf8) + (try BatchReport.encoder.encode(missingShards))
                  + Data(",\"summary\":".utf8) + (try BatchReport.encoder.encode(totals)) + Data("}\n".utf8))
    }
}

/// An unnamed temporary file written as a stream of JSON array elements, one per line, buffered.
final class ScratchStream {
    private let descriptor: FileDescriptor
    private let output: BufferedOutput
    private var count = 0

    init() throws {
        descriptor = try FileSystem.unnamedTemporaryFile()
        output = BufferedOutput(descriptor, path: "<temporary>")
    }

    deinit { try? descriptor.close() }  // Squash close error of a file without a name.

    func appendElement(_ element: Data) throws {
        try output.write(Data((count == 0 ? "\n" : ",\n").utf8) + element)
        count += 1
    }

    /// Copies the elements (and a final newline when there are any) to `output`.
    func copy(to destination: FileDescriptor) throws {
        if count > 0 { try output.write(Data("\n".utf8)) }
        try output.flush()
        var position: Int64 = 0
        let chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: LineReader.chunkSize, alignment: 16)
        defer { chunk.deallocate() }
        while position < output.written {
            let got = try FileSystem.read(descriptor, at: position, into: chunk, path: "<temporary>")
            guard got > 0 else { break }
            try FileSystem.writeAll(destination, UnsafeRawBufferPointer(rebasing: chunk[0..<got]), path: "<output>")
            position += Int64(got)
        }
    }
}
