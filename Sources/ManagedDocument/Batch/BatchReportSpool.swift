import Foundation
import SystemPackage
@_spi(Core) import MDZCore

/// A run's items written aside while it goes (``BatchReportFile``): a first line that names the run, then one item
/// per line. A spool whose lock is free belongs to a run that died before it wrote its report: ``salvage(into:for:)``
/// adds what it recorded to the report, as an attempt marked killed, then removes it.
struct BatchReportSpool {
    /// A spool is `.<report name>.<random>.spool` beside its report: not a `.partial` temporary, so no cleaner of
    /// stale temporaries (a walk, another run) removes a dead run's spool before its shard's next run adds it.
    static let suffix = ".spool"
    static let formatKey = "docconvertBatchSpool"
    static var signature: String { "{\"\(formatKey)\":" }

    /// The first line: the run (its report's fields, no items) and its attempt.
    private struct Header: Codable {
        var docconvertBatchSpool: Int
        var run: BatchReport
        var attempt: BatchReport.Attempt
    }

    /// The line that says an item's conversion starts.
    struct Started: Codable {
        var started: String
    }

    let path: FilePath
    /// Open and locked by this process: no other run salvages it meanwhile.
    private let descriptor: FileDescriptor

    /// A new spool beside the report at `path`, created already locked.
    static func create(beside path: FilePath) throws -> (FileDescriptor, FilePath) {
        guard let name = path.lastComponent?.string else {
            throw DocumentError(.cannotCreate, path: path, reason: "the report has no file name")
        }
        let random = FileSystem.randomSuffix()
        let spool = path.removingLastComponent().appending(".\(name).\(random)\(suffix)")
        do {
            return (try AtomicFile.createLocked(spool, ownership: AtomicFile.FinalOwnership(target: nil, restrictingTo: nil)), spool)
        } catch let error as Errno {
            throw DocumentError(.cannotCreate, path: path, reason: "cannot create the file its items are written to while the run goes",
                                underlyingError: error)
        }
    }

    /// The first line of a new spool.
    static func header(of run: BatchReport, attempt: BatchReport.Attempt) throws -> Data {
        var run = run
        run.items = []
        // The signature first (sorted keys would put `attempt` first), as a report's.
        let fields = try BatchReport.encoder.encode(Header(docconvertBatchSpool: 1, run: run, attempt: attempt))
        guard let key = fields.range(of: Data(",\"\(formatKey)\":1".utf8)) else {
            throw DocumentError(.ioFailure, path: nil, reason: "the report's spool header could not be encoded")
        }
        var line = Data(signature.utf8) + Data("1,".utf8) + fields[fields.index(after: fields.startIndex)..<key.lowerBound]
        line += fields[key.upperBound...]
        return line + Data("\n".utf8)
    }

    /// The items of a spool (after its first line) up to `end`, sorted in bounded memory, and its header when it
    /// has one; a last line cut short (the run died while writing it) is left out.
    static func items(in descriptor: FileDescriptor, path: FilePath, upTo end: Int64? = nil) throws -> Contents {
        var lines = LineReader(descriptor, path: path, maxLineLength: ReportCursor.maxLineLength)
        var contents = Contents()
        var started: Set<String> = []
        let startKey = Array("{\"started\":".utf8)
        while let line = try lines.next(), line.isTerminated, end.map({ line.offset < $0 }) ?? true {
            if line.offset == 0, line.bytes.starts(with: Array(signature.utf8)) {
                let header = try? BatchPlan.decoder.decode(Header.self, from: Data(line.bytes))
                contents.run = header?.run
                contents.attempt = header?.attempt
                continue
            }
            do {
                if line.bytes.starts(with: startKey) {
                    started.insert(try BatchPlan.decoder.decode(Started.self, from: Data(line.bytes)).started)
                    continue
                }
                let item = try BatchPlan.decoder.decode(BatchItem.self, from: Data(line.bytes))
                started.remove(item.source)
                try contents.items.add(item, line: Data(line.bytes))
            } catch let error as DocumentError {
                throw error
            } catch {
                throw DocumentError(.invalidMetadata, path: path, reason: "holds a line that is not an item at offset \(line.offset) (\(DocumentError.summary(of: error)))")
            }
        }
        contents.inProgress = started.sorted()
        return contents
    }

    /// What a spool holds.
    struct Contents {
        /// Its items, sorted by source.
        var items = SortedItems()
        /// Items started and not finished (at most two per job: the set is small).
        var inProgress: [String] = []
        var run: BatchReport?
        var attempt: BatchReport.Attempt?
    }

    /// The spools beside the report at `path` whose run is dead (their lock taken by this process), oldest first.
    static func abandoned(beside path: FilePath) -> [BatchReportSpool] {
        let folder = path.removingLastComponent()
        guard let name = path.lastComponent?.string,
              let names = try? FileSystem.contentsOfDirectory(folder.isEmpty ? "." : folder) else { return [] }
        return names.sorted().filter { $0.hasPrefix(".\(name).") && $0.hasSuffix(suffix) }
            .compactMap { BatchReportSpool(claiming: (folder.isEmpty ? "." : folder).appending($0)) }
    }

    /// Whether the file at `path` is a spool whose run is dead (its lock is free).
    static func isAbandoned(_ path: FilePath) -> Bool {
        BatchReportSpool(claiming: path) != nil
    }

    /// The spool at `path`, locked by this process, when it is one and its run is dead.
    private init?(claiming path: FilePath) {
        guard let descriptor = try? FileSystem.openForReading(path) else { return nil }
        guard FileSystem.lockExclusively(descriptor, wait: false),
              (try? FileSystem.read(descriptor, at: 0, count: Self.signature.utf8.count, path: path)) == Array(Self.signature.utf8)
        else {
            try? descriptor.close()  // Squash close error of a read-only descriptor.
            return nil
        }
        self.path = path
        self.descriptor = descriptor
    }

    /// Adds the dead run's items to the report at `reportPath` (written aside and renamed into place) as a killed
    /// attempt, then removes the spool. A spool of another shard or kind of run is left as it is.
    func salvage(into reportPath: FilePath, for current: BatchReport) throws {
        defer { try? descriptor.close() }  // Squash close error of a read-only descriptor (drops the lock).
        let read = try Self.items(in: descriptor, path: path)
        guard let run = read.run, var attempt = read.attempt, run.conflict(with: current) == nil else { return }
        var killed = run
        var summary = read.items.summary
        let lastWrite = ((try? FileSystem.status(path)) ?? nil).map { Date(timeIntervalSince1970: $0.modificationTime) }
        attempt.finishedAt = max(lastWrite ?? attempt.startedAt, attempt.startedAt)
        summary.duration = attempt.finishedAt.timeIntervalSince(attempt.startedAt)
        summary.interrupted = true
        attempt.summary = summary
        attempt.killed = true
        attempt.inProgress = read.inProgress.isEmpty ? nil : read.inProgress
        killed.summary = summary
        killed.finishedAt = attempt.finishedAt
        _ = try ReportComposer.write(run: killed, as: attempt, items: read.items,
                                     previous: try BatchReportFile.previousReport(at: reportPath, for: current), to: reportPath)
        try FileSystem.removeFile(path)
    }
}
