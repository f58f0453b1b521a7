#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import SystemPackage
@_spi(Core) import MDZCore

/// The JSON report of a batch run (docs/CLI.md, "batch"): what `docconvert batch --report FILE` writes and what
/// ``BatchReportFile`` writes for an app that runs ``BatchConverter`` itself.
///
/// A report file is one shard's history: a rerun of the same shard (a resubmitted array task, a retried pod, a
/// second run beside the first) merges its items into the report already there instead of replacing it, so an
/// item converted by the first attempt stays `converted` when the rerun finds it done, and ``attempts`` lists
/// every run. Every report starts with the bytes `{"docconvertBatchReport":` (``signature``), which is how a walk
/// knows a report it meets in the tree is the tool's own file and never an item.
public struct BatchReport: Codable, Sendable, Equatable {
    /// The first bytes of every report: the key that names the format, first.
    public static let signature = "{\"\(formatKey)\":"
    static let formatKey = "docconvertBatchReport"
    /// The version written in the ``signature`` key: 2 added ``attempts`` and merging across reruns.
    public static let formatVersion = 2

    /// The root, absolute, as the latest attempt saw it (a shared volume may be mounted elsewhere on other workers;
    /// item paths are relative to it).
    public var root: String
    /// The shard whose items this report holds.
    public var shard: BatchShard
    /// Whether the runs were dry runs (a plan; nothing changed).
    public var dryRun: Bool
    /// The legacy-files policy of the latest attempt: `keep`, `backup` or `delete`.
    public var legacy: String
    /// The compression of the latest attempt: `deflate` or `store`.
    public var compression: String
    /// `--jobs` of the latest attempt.
    public var jobs: Int
    /// `docconvert <version>` of the latest attempt.
    public var generator: String
    /// When the first attempt started.
    public var startedAt: Date
    /// When the latest attempt finished; `nil` while a run is going.
    public var finishedAt: Date?
    /// One entry per item, sorted by source. For an item several attempts saw, the `converted` entry when one
    /// converted it, else the latest attempt's.
    public var items: [BatchItem]
    /// Totals over ``items``; `duration` is the sum of the attempts' durations and `interrupted` is the latest
    /// attempt's.
    public var summary: BatchSummary
    /// Every run that wrote this report, oldest first (absent from the `--json` stream, which is one run).
    public var attempts: [Attempt]?

    /// One run of the shard.
    public struct Attempt: Codable, Sendable, Equatable {
        /// When the run started.
        public var startedAt: Date
        /// When the run finished (after an interrupt too).
        public var finishedAt: Date
        /// The machine and process that ran it, and the scheduler's job when there was one (`slurm 1234_5`,
        /// `kubernetes index 3`).
        public var host: String
        /// The process's ID on ``host``.
        public var processID: Int32
        /// The scheduler's job, when one ran it.
        public var job: String?
        /// `--jobs` of the run.
        public var jobs: Int
        /// `docconvert <version>`, or the app that ran it.
        public var generator: String
        /// That run's own items, counted (an item it found done counts as `skipped-already-done` here).
        public var summary: BatchSummary
        /// `true` for a run killed before it wrote its report (SIGKILL, the OOM killer, a lost node): what it recorded
        /// was added by the next run of the shard, and ``finishedAt`` is when it last recorded an item.
        public var killed: Bool?
        /// For a killed run: the items it had started and not finished when it died (at most two per job). Their
        /// conversion may have completed: a later run finds those `skipped-already-done`.
        public var inProgress: [String]?

        /// An attempt with these facts.
        public init(startedAt: Date, finishedAt: Date, host: String, processID: Int32, job: String?, jobs: Int,
                    generator: String, summary: BatchSummary) {
            self.startedAt = startedAt
            self.finishedAt = finishedAt
            self.host = host
            self.processID = processID
            self.job = job
            self.jobs = jobs
            self.generator = generator
            self.summary = summary
        }
    }

    /// A report of one run that has not started its items yet.
    public init(root: String, shard: BatchShard, dryRun: Bool, legacy: String, compression: String, jobs: Int,
                generator: String, startedAt: Date = Date()) {
        self.root = root
        self.shard = shard
        self.dryRun = dryRun
        self.legacy = legacy
        self.compression = compression
        self.jobs = jobs
        self.generator = generator
        self.startedAt = startedAt
        items = []
        summary = BatchSummary()
    }

    /// Why `previous` cannot take this run's items (another shard, another shard count, a dry run beside a real
    /// one), in words; `nil` when it can.
    public func conflict(with previous: BatchReport) -> String? {
        if previous.shard.count != shard.count || previous.shard.index != shard.index {
            return "it holds the report of shard \(previous.shard) and this run is shard \(shard)"
        }
        if previous.dryRun != dryRun {
            return previous.dryRun ? "it holds a dry run's plan" : "it holds the report of a real run and this is a dry run"
        }
        return nil
    }

    /// This run's report merged into `previous`, the report of earlier runs of the same shard: items by source
    /// (a `converted` entry is never replaced by a later attempt's `skipped-already-done`), attempts appended,
    /// the summary recounted.
    public func merged(into previous: BatchReport?) -> BatchReport {
        merged(into: previous, as: thisAttempt)
    }

    /// The runs this report records: its ``attempts``, or, for a report of format 1 (which had none), the one run
    /// its own fields describe.
    var recordedAttempts: [Attempt] {
        attempts ?? [Attempt(startedAt: startedAt, finishedAt: finishedAt ?? startedAt, host: "", processID: 0, job: nil,
                             jobs: jobs, generator: generator, summary: summary)]
    }

    /// This process's run of the report, as an attempt.
    var thisAttempt: Attempt {
        Attempt(startedAt: startedAt, finishedAt: finishedAt ?? Date(), host: Self.hostName, processID: getpid(),
                job: Self.schedulerJob(ProcessInfo.processInfo.environment), jobs: jobs, generator: generator,
                summary: summary)
    }

    /// This run's items merged into `previous` as `attempt`.
    func merged(into previous: BatchReport?, as attempt: Attempt) -> BatchReport {
        var result = self
        var bySource: [String: BatchItem] = [:]
        var earlier: [Attempt] = []
        if let previous {
            result.startedAt = min(previous.startedAt, startedAt)
            for item in previous.items { bySource[item.source] = item }
            earlier = previous.recordedAttempts
        }
        for item in items { bySource[item.source] = Self.kept(earlier: bySource[item.source], later: item) }
        result.items = bySource.keys.sorted().map { bySource[$0]! }
        result.attempts = earlier + [attempt]
        var totals = BatchSummary()
        for item in result.items { totals.add(item) }
        totals.duration = result.attempts!.reduce(0) { $0 + $1.summary.duration }
        totals.interrupted = summary.interrupted
        result.summary = totals
        return result
    }

    /// The entry a shard's report keeps for an item that an earlier run and a later one both saw: the later one's,
    /// except that a `converted` entry is never replaced by a later attempt's other outcome (`skipped-already-done`,
    /// a failure). The in-memory merge above and the streaming one (`ReportComposer`) both ask it.
    static func kept(earlier: BatchItem?, later: BatchItem) -> BatchItem {
        if let earlier, earlier.outcome == .converted, later.outcome != .converted { return earlier }
        return later
    }

    /// The report's bytes: ``signature`` first, then the fields with sorted keys, one item per line.
    public func encoded() throws -> Data {
        let encoder = Self.encoder
        var data = Data(Self.signature.utf8) + Data("\(Self.formatVersion),".utf8)
        var header = self
        header.items = []
        let headerData = try encoder.encode(header)
        guard headerData.first == UInt8(ascii: "{"), let itemsKey = headerData.range(of: Data("\"items\":[]".utf8))
        else { throw DocumentError(.ioFailure, path: FilePath(root), reason: "the report could not be encoded") }
        data += headerData[headerData.index(after: headerData.startIndex)..<itemsKey.lowerBound]
        data += Data("\"items\":[".utf8)
        for (number, item) in items.enumerated() {
            data += Data((number == 0 ? "\n" : ",\n").utf8) + (try encoder.encode(item))
        }
        data += Data((items.isEmpty ? "]" : "\n]").utf8)
        data += headerData[itemsKey.upperBound...]
        data += Data("\n".utf8)
        return data
    }

    /// Reads a report written by any version of `docconvert batch`.
    ///
    /// - Throws: ``DocumentError/Code/notFound`` when there is no file, ``DocumentError/Code/invalidMetadata``
    ///   when the file is not a batch report.
    public static func read(from path: FilePath) throws -> BatchReport {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path.string))
        } catch {
            if !((try? FileSystem.exists(path)) ?? true) {
                throw DocumentError(.notFound, path: path, reason: "no such report")
            }
            throw DocumentError(.ioFailure, path: path, reason: "the report cannot be read (\(error.localizedDescription))")
        }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        do {
            return try decoder.decode(BatchReport.self, from: data)
        } catch {
            throw DocumentError(.invalidMetadata, path: path, reason: "is not a batch report written by docconvert (\(DocumentError.summary(of: error)))")
        }
    }

    /// Whether the file at `path` is a batch report (it starts with ``signature``): a walk skips those.
    public static func isReport(at path: FilePath) -> Bool {
        FileSystem.prefix(of: path, count: signature.utf8.count) == Array(signature.utf8)
    }

    static var encoder: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        return encoder
    }

    static var hostName: String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "" }
        let bytes = buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The scheduler's name for this run, from its environment.
    static func schedulerJob(_ environment: [String: String]) -> String? {
        if let array = environment["SLURM_ARRAY_JOB_ID"], let task = environment["SLURM_ARRAY_TASK_ID"] {
            return "slurm \(array)_\(task)"
        }
        if let job = environment["SLURM_JOB_ID"] { return "slurm \(job)" }
        if let index = environment["JOB_COMPLETION_INDEX"] { return "kubernetes index \(index)" }
        return nil
    }
}

/// A batch report on disk, the way `docconvert batch --report FILE` keeps it: items spooled to a temporary file
/// beside the report while the run goes (memory stays flat however many items there are), then, under a lock on the
/// report's folder, merged into the report an earlier run of the same shard left there and written aside, flushed and
/// renamed into place (with the folder flushed after).
///
/// Two runs of the same shard that end at the same time both land: each merges under the folder's lock. A file
/// at the path that is not a report, or is another shard's or a dry run's, is refused before the run starts
/// (``init(path:run:)``), so no report is ever overwritten by an unrelated one. The spool is a locked
/// `.NAME.*.spool` file (a walk never takes it for an item, nor removes it) that starts with a line naming the run; a run
/// killed before its report was written (SIGKILL, the OOM killer, a lost node) leaves its spool unlocked, and the next
/// run of the shard adds what it recorded to the report as an attempt marked ``BatchReport/Attempt/killed`` before it
/// starts, then removes it. The merge at the end sorts this run's items in chunks aside and merges them with the
/// earlier report's as streams: memory stays flat whatever the shard's size.
///
/// ```swift
/// let run = BatchReport(root: "/srv/home", shard: .all, dryRun: false, legacy: "backup",
///                       compression: "deflate", jobs: 4, generator: "my-app 1.0")
/// let file = try BatchReportFile(path: "/srv/reports/home.json", run: run)
/// let summary = try await BatchConverter(root: "/srv/home").run { item in file.add(item) }
/// let merged = try file.commit(summary: summary)
/// ```
public final class BatchReportFile: Sendable {
    /// Where the report is kept.
    public let path: FilePath
    private let run: BatchReport
    private let spool: Protected<Spool>

    /// This run's items as JSON lines in a file beside the report (``BatchReportSpool``), locked while the run lives.
    private struct Spool {
        var descriptor: FileDescriptor?
        var path: FilePath
        var offset: Int64 = 0
        var failure: DocumentError?
        /// A commit is writing the report from the items recorded up to the offset it read; items added meanwhile
        /// are recorded past it (they stay in the spool should the commit fail).
        var isCommitting = false
    }

    /// Prepares to write `run`'s report at `path`.
    ///
    /// - Throws: ``DocumentError/Code/cannotCreate`` when the folder is missing or cannot be written, or the file
    ///   there is not a report or is the report of another shard or of a dry run (the error says which).
    public init(path: FilePath, run: BatchReport) throws {
        self.path = path
        self.run = run
        try AtomicFile.checkFolder(of: path)
        _ = try Self.previousReport(at: path, for: run)
        try Self.withFolderLocked(of: path) {
            for spool in BatchReportSpool.abandoned(beside: path) {
                try spool.salvage(into: path, for: run)
            }
        }
        try AtomicFile.removeStaleTemporaries(for: path)
        let (descriptor, spoolPath) = try BatchReportSpool.create(beside: path)
        do {
            let header = try BatchReportSpool.header(of: run, attempt: run.thisAttempt)
            try header.withUnsafeBytes { try FileSystem.writeAll(descriptor, $0, path: spoolPath) }
            spool = Protected(Spool(descriptor: descriptor, path: spoolPath, offset: Int64(header.count)))
        } catch {
            try? FileSystem.removeFile(spoolPath)  // Cleanup after a first error: nothing was recorded.
            try? descriptor.close()  // Squash close error of a file just removed.
            throw error
        }
    }

    deinit {
        // > A report never committed (the app gave up on it) leaves its spool: the next run of the shard adds it.
        spool.withLock { try? $0.descriptor?.close() }  // Squash close error: the spool stays for the next run.
    }

    /// Records that an item's conversion starts (``BatchConverter/run(starting:_:)``), so that a run killed while
    /// converting it leaves its name behind; safe from any thread.
    public func start(_ source: String) {
        guard let line = try? BatchReport.encoder.encode(BatchReportSpool.Started(started: source)) else { return }
        append(line)
    }

    /// Adds an item as it finishes; safe from any thread. A write that fails is reported by ``commit(summary:finishedAt:)``.
    public func add(_ item: BatchItem) {
        guard let line = try? BatchReport.encoder.encode(item) else { return }
        append(line)
    }

    private func append(_ line: Data) {
        spool.withLock { spool in
            guard spool.failure == nil, let descriptor = spool.descriptor else { return }
            let bytes = line + Data("\n".utf8)
            do {
                try bytes.withUnsafeBytes { try FileIO.write(descriptor, $0, at: spool.offset, path: spool.path) }
                spool.offset += Int64(bytes.count)
            } catch {
                spool.failure = DocumentError.io("cannot write the report's items aside", path: spool.path,
                                                 errno: error as? Errno)
            }
        }
    }

    /// Writes the report: this run's items and `summary` merged into the report already at the path, in bounded
    /// memory (the items are sorted in chunks aside, then merged with the earlier report's as streams).
    ///
    /// - Returns: the report as written, without its items (they can be millions: ``BatchReport/read(from:)`` reads
    ///   them back); its ``BatchReport/summary`` counts them.
    /// - Throws: ``DocumentError`` when it cannot be written; the file already there is then unchanged.
    @discardableResult
    public func commit(summary: BatchSummary, finishedAt: Date = Date()) throws -> BatchReport {
        var run = self.run
        run.summary = summary
        run.finishedAt = finishedAt
        // > The spool is claimed under its lock and the report composed once that is let go: the folder's lock is
        // > never taken while another is held. The spool's file stays locked until the report that holds its items is
        // > in place: a failure on the way leaves it for a later commit or the next run of the shard, which adds what
        // > it recorded.
        let (descriptor, spoolPath, end) = try spool.withLock { spool in
            if let failure = spool.failure { throw failure }
            guard let descriptor = spool.descriptor else {
                throw DocumentError(.cannotCreate, path: path, reason: "the report was already written")
            }
            guard !spool.isCommitting else {
                throw DocumentError(.cannotCreate, path: path, reason: "the report is being written by another call")
            }
            spool.isCommitting = true
            return (descriptor, spool.path, spool.offset)
        }
        let report: BatchReport
        do {
            let items = try BatchReportSpool.items(in: descriptor, path: spoolPath, upTo: end).items
            report = try Self.withFolderLocked(of: path) {
                try ReportComposer.write(run: run, as: run.thisAttempt, items: items,
                                         previous: try Self.previousReport(at: path, for: run), to: path)
            }
        } catch {
            spool.withLock { $0.isCommitting = false }
            throw error
        }
        // > Let go under the lock, so that no add writes to it once it is closed.
        spool.withLock { $0.descriptor = nil }
        try? FileSystem.removeFile(spoolPath)  // Cleanup: its items are in the report; a leftover is an empty attempt.
        try? descriptor.close()  // Squash close error of a removed spool.
        return report
    }

    /// Runs `body` under the exclusive lock of the report's folder, which every writer of a report there takes.
    static func withFolderLocked<T>(of path: FilePath, _ body: () throws -> T) throws -> T {
        let parent = path.removingLastComponent()
        let folder = try FileSystem.openForReading(parent.isEmpty ? "." : parent)
        defer { try? folder.close() }  // Squash close error of a read-only descriptor (also drops the lock).
        _ = FileSystem.lockExclusively(folder, wait: true)
        return try body()
    }

    /// The report an earlier run left at the path, `nil` when there is none.
    static func previousReport(at path: FilePath, for run: BatchReport) throws -> ReportCursor? {
        guard try FileSystem.exists(path) else { return nil }
        let previous: ReportCursor
        do {
            previous = try ReportCursor(path: path)
        } catch let error as DocumentError where error.code == .notFound {
            return nil
        } catch let error as DocumentError {
            throw DocumentError(.cannotCreate, path: path,
                                reason: "\(error.code == .invalidMetadata ? error.reason : "cannot be read as a batch report (\(error.reason))"); it was left as it is: choose another report file")
        }
        if let conflict = run.conflict(with: previous.header) {
            throw DocumentError(.cannotCreate, path: path,
                                reason: "cannot take this run's report: \(conflict); choose another report file")
        }
        return previous
    }
}

/// A run's report written while it goes, for a pipe (`docconvert batch --json`): the header's fields, then
/// `items` one per line as they finish, then `summary` and `finishedAt`. The same shape as ``BatchReport`` (less
/// ``BatchReport/attempts``), starting with ``BatchReport/signature``; ``BatchReport/read(from:)`` reads it.
public final class BatchReportStream: Sendable {
    private let write: @Sendable (Data) -> Void
    private let count = Protected(0)

    /// A stream that hands its bytes to `write`, in order, one call per piece.
    public init(write: @escaping @Sendable (Data) -> Void) {
        self.write = write
    }

    /// Writes the fields known before any item.
    public func begin(_ run: BatchReport) {
        let header = Header(root: run.root, shard: run.shard, dryRun: run.dryRun, legacy: run.legacy,
                            compression: run.compression, jobs: run.jobs, generator: run.generator,
                            startedAt: run.startedAt)
        guard let data = try? BatchReport.encoder.encode(header), data.count > 2 else { return }
        write(Data(BatchReport.signature.utf8) + Data("\(BatchReport.formatVersion),".utf8)
              + data.dropFirst().dropLast() + Data(",\"items\":[".utf8))
    }

    /// Writes one item; safe from any thread (items are written one at a time).
    public func item(_ item: BatchItem) {
        guard let data = try? BatchReport.encoder.encode(item) else { return }
        count.withLock { count in
            write(Data((count == 0 ? "\n" : ",\n").utf8) + data)
            count += 1
        }
    }

    /// Writes the summary and closes the document; `error`, when the run failed as a whole (its report could not
    /// be written), is added as the document's `error` (`code`, `message`), so a reader still gets one document.
    public func end(_ summary: BatchSummary, finishedAt: Date = Date(), error: BatchItem.Failure? = nil) {
        let summaryData = (try? BatchReport.encoder.encode(summary)) ?? Data("{}".utf8)
        let finished = (try? BatchReport.encoder.encode(finishedAt)) ?? Data("null".utf8)
        let errorData = error.flatMap { try? BatchReport.encoder.encode($0) }.map { Data(",\"error\":".utf8) + $0 } ?? Data()
        write(Data("\n],\"summary\":".utf8) + summaryData + errorData + Data(",\"finishedAt\":".utf8) + finished
              + Data("}\n".utf8))
    }

    private struct Header: Encodable {
        var root: String
        var shard: BatchShard
        var dryRun: Bool
        var legacy: String
        var compression: String
        var jobs: Int
        var generator: String
        var startedAt: Date
    }
}
