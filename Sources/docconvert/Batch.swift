import ArgumentParser
import Dispatch
import Foundation
@_spi(Core) import MDZCore
import ManagedDocument
import SystemPackage

struct Batch: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "batch",  // named, not derived from the type's name at every start (docs/BENCHMARKS.md)
        abstract: "Convert every legacy store under a folder into bundles, in parallel, resumably.",
        discussion: """
            Walks ROOT (symbolic links are never followed), finds every legacy SQLite store and UIManagedDocument \
            package by content, whatever its name, and converts each into a bundle beside it, exactly as \
            `docconvert convert` does: consolidated through SQLite, verified, written aside and renamed, and only \
            then are the legacy files kept, backed up (the default) or deleted. Conversion starts while the walk is \
            still going; memory does not grow with the tree.

            Every item is reported once: converted, skipped-already-done, not-a-store, busy or failed. One failure \
            never stops the run. Run the same command again to resume: finished items are recognised by their \
            bundle and skipped, failed and busy ones are tried again. Ctrl-C (or SIGTERM) lets the items in \
            progress finish, starts no new one and prints the summary; a second Ctrl-C abandons them (the next run \
            cleans up what they left).

            Fleets: --shard K/N gives this worker the items whose path relative to ROOT hashes to K modulo N, so \
            N workers over a shared volume each take a disjoint share. Without --shard, a Kubernetes Indexed Job's \
            JOB_COMPLETION_INDEX (with --shard-count or DOCCONVERT_SHARD_COUNT) or a Slurm array's \
            SLURM_ARRAY_TASK_ID are used; for Slurm, pass --shard-count with the size of the array first submitted \
            (the shard is the task ID modulo it), so one task resubmitted alone takes only its share. Each item is \
            converted under its document's lock, so overlapping workers never convert the same item twice. Merge \
            the shards' --report files with `docconvert merge-reports FOLDER` (see the README).

            Plans: on a shared file system, walk the tree once with --plan-only FILE (it changes nothing), then give \
            every worker --plan FILE: each converts its share of the plan's items without listing a folder, so the \
            file server sees one walk instead of one per worker. A store is still detected again under its lock \
            when it is converted, and an item gone since the plan is reported as gone, so an old plan never \
            converts anything wrongly; a plan cut short or changed after it was written is refused (exit 65).

            Progress (items, bytes, rate, ETA) goes to stderr: a live line on a terminal, a plain line every \
            --progress-interval seconds elsewhere, none with --quiet. Results go to stdout (--json: one JSON \
            document, items streamed as they finish) and to --report FILE: the shard's report, kept across runs (a \
            rerun merges its items into it: what an earlier run converted stays converted, every run is listed), \
            written aside and renamed into place at the end. A FILE that is not a report, or another shard's, is \
            refused. Reports are never taken for items of the tree, wherever they are written.

            Exit status: 0 every store is converted or was already (or the plan was written); 65 at least one item \
            failed, or the plan is damaged; 75 none failed \
            but at least one was busy (run again later); 130 or 143 interrupted by SIGINT or SIGTERM (run again \
            to finish); 64 usage error; 66 ROOT does not exist; 73 the report cannot be written.

            Examples:
              docconvert batch ~/Library --dry-run
              docconvert batch /srv/home --jobs 4 --report home.json
              docconvert batch /mnt/shared --shard 3/16 --legacy keep --report shard-3.json
              docconvert batch /mnt/shared --migrations migrations/ --json > report.json
              docconvert batch /mnt/shared --plan-only /mnt/plans/shared.plan
              docconvert batch /mnt/shared --plan /mnt/plans/shared.plan --shard 3/16 --report shard-3.json
            """
    )

    @Argument(help: ArgumentHelp("The folder to convert (or one store).", valueName: "root"))
    var root: String

    @Option(name: [.short, .long], help: ArgumentHelp("Conversions computing at once (one waiting for the disk lets another compute); the default is this machine's number of cores.", valueName: "n"))
    var jobs: Int = ProcessInfo.processInfo.activeProcessorCount

    @Flag(name: .long, help: "Print what would be converted, what would be skipped and why, and total bytes; change nothing.")
    var dryRun = false

    @Option(name: .long, help: ArgumentHelp("Keep this shard's JSON report in this file: merged with the report earlier runs left there, written aside, renamed into place at the end.", valueName: "file"))
    var report: String?

    @Option(name: .long, help: ArgumentHelp("What to do with the legacy files once their bundle is safe: keep, backup or delete.", valueName: "policy"))
    var legacy: LegacyPolicy = .backup

    @Option(name: .long, help: ArgumentHelp("Where backups go (default: docconvert-backup/ beside each source; same volume).", valueName: "folder"))
    var backupDir: String?

    @Option(name: .long, parsing: .unconditional, help: ArgumentHelp("Seconds to wait for a store another process is writing, or an item another worker holds.", valueName: "seconds"))
    var busyTimeout: Double = 5

    @OptionGroup var compression: CompressionOptions

    @Option(name: .long, help: ArgumentHelp("A folder of V<version>__<description>.sql migrations to apply to every converted bundle.", valueName: "folder"))
    var migrations: String?

    @Option(name: .long, help: ArgumentHelp("This worker's share, K of N (0-based). Default: from JOB_COMPLETION_INDEX or SLURM_ARRAY_TASK_ID, else all.", valueName: "k/n"))
    var shard: String?

    @Option(name: .long, help: ArgumentHelp("The number of shards, with JOB_COMPLETION_INDEX or SLURM_ARRAY_TASK_ID: the Job's completions, or the size of the Slurm array first submitted (the shard is then the task ID modulo n). Default: DOCCONVERT_SHARD_COUNT, else SLURM_ARRAY_TASK_COUNT.", valueName: "n"))
    var shardCount: Int?

    @Option(name: .long, help: ArgumentHelp("Walk and classify the tree once, write its plan to this file for --plan, and change nothing.", valueName: "file"))
    var planOnly: String?

    @Option(name: .long, help: ArgumentHelp("Convert this shard's items of a plan made with --plan-only, without walking the tree.", valueName: "file"))
    var plan: String?

    @Flag(name: .shortAndLong, help: "No progress on stderr.")
    var quiet = false

    @Flag(name: .shortAndLong, help: "Also print items that are not stores, each with why (always in --dry-run, --json and --report).")
    var verbose = false

    @Option(name: .long, help: ArgumentHelp("Seconds between progress lines when stderr is not a terminal.", valueName: "seconds"))
    var progressInterval: Double = 10

    @OptionGroup var outputOptions: OutputOptions

    func validate() throws {
        guard jobs >= 1 else { throw ValidationError("--jobs must be at least 1") }
        guard busyTimeout >= 0 else { throw ValidationError("--busy-timeout must not be negative") }
        guard progressInterval > 0 else { throw ValidationError("--progress-interval must be positive") }
        if let shard {
            _ = try parse { try BatchShard(parsing: shard) }
        } else {
            _ = try parse { try BatchShard.fromEnvironment(ProcessInfo.processInfo.environment, count: shardCount) }
        }
        if let shardCount, shardCount < 1 { throw ValidationError("--shard-count must be at least 1") }
        if planOnly != nil {
            let conflicting = [(plan != nil, "--plan"), (shard != nil, "--shard"), (shardCount != nil, "--shard-count"),
                               (report != nil, "--report"), (migrations != nil, "--migrations"), (dryRun, "--dry-run")]
            if let (_, name) = conflicting.first(where: { $0.0 }) {
                throw ValidationError("--plan-only walks the whole tree and changes nothing: it takes no \(name) (give it to the runs that use the plan)")
            }
        }
    }

    private func parse<T>(_ body: () throws -> T) throws -> T {
        do { return try body() } catch let error as DocumentError where error.code == .invalidArgument { throw ValidationError(error.reason) }
    }

    func run() async throws {
        if let planOnly { return try writePlan(to: FilePath(planOnly)) }
        let options = try batchOptions()
        let json = outputOptions.json
        guard FileManager.default.fileExists(atPath: root) else {
            throw failure(ErrorJSON(code: DocumentError.Code.notFound.description,
                                    message: "\(root): no such file or folder; name the folder to convert"),
                          status: DocConvert.exitStatus(for: .notFound), json: json)
        }

        // A relative root (`.`, `./sub`) is taken from the current folder; items stay relative to it.
        let batch = BatchConverter(root: FilePath(root), options: options)
        let absoluteRoot = FilePath(FileManager.default.currentDirectoryPath).pushing(FilePath(root)).lexicallyNormalized()
        let run = BatchReport(root: absoluteRoot.string, shard: options.shard, dryRun: dryRun, legacy: legacy.rawValue,
                              compression: compression.compression.rawValue, jobs: jobs,
                              generator: "docconvert \(ManagedDocumentVersion.string)")
        let reportFile = try reportingReportErrors(json: json) {
            try report.map { try BatchReportFile(path: FilePath($0), run: run) }
        }
        let stream = json ? BatchReportStream { FileHandle.standardOutput.write($0) } : nil
        stream?.begin(run)

        // > A dry run lists what it would skip, and why, with what it would convert.
        let console = BatchConsole(batch: batch, quiet: quiet, interval: progressInterval,
                                   printsItems: !json, verbose: verbose || dryRun)
        let links = DanglingLinks()
        let signals = SignalTrap { signal, isSecond in
            if isSecond {
                console.message("abandoning the items in progress; run the same command again to clean up and finish")
                Foundation.exit(128 + signal)
            }
            console.message(Self.stoppingMessage(signal: signal))
            batch.cancel()
        }
        tellAboutShard(options, root: batch.root, console: console)
        console.start()
        let summary: BatchSummary
        do {
            summary = try await batch.run(starting: { reportFile?.start($0) }) { item in
                // One call at a time (BatchConverter.run's contract): the stream, the file and the console in order.
                stream?.item(item)
                reportFile?.add(item)
                console.item(item)
                links.add(item)
            }
        } catch let error as DocumentError {
            console.stop()
            // > The report document is open: it is closed with the error, so stdout still holds one document.
            stream?.end(BatchSummary(), error: .init(code: error.code, message: DocConvert.message(for: error)))
            throw failure(ErrorJSON(error), status: DocConvert.exitStatus(for: error), json: false)
        }
        console.stop()
        var reportError: DocumentError?
        if let reportFile {
            do { _ = try reportFile.commit(summary: summary) } catch let error as DocumentError { reportError = error }
        }
        stream?.end(summary, error: reportError.map { .init(code: $0.code, message: DocConvert.message(for: $0)) })
        for line in links.dangling(under: batch.root) { console.message(line) }
        if !json { console.printSummary(summary, dryRun: dryRun, listsNotStores: verbose || dryRun) }
        if let reportError { throw failure(ErrorJSON(reportError), status: 73, json: false) }
        if summary.interrupted { throw ExitCode(128 + (signals.received ?? SIGINT)) }
        if summary.count(.failed) > 0 { throw ExitCode(65) }
        if summary.count(.busy) > 0 { throw ExitCode(75) }
    }

    /// The options given, the shard (from `--shard` or the scheduler's variables) and the plan opened for it.
    private func batchOptions() throws -> BatchOptions {
        var options = BatchOptions()
        options.jobs = jobs
        options.dryRun = dryRun
        options.conversion.legacyPolicy = legacy
        options.conversion.backupDirectory = backupDir.map { FilePath($0) }
        options.conversion.busyTimeout = busyTimeout
        options.conversion.writing = compression.writingOptions
        options.survey = !quiet  // a total for the progress line's ETA
        options.shard = try parse {
            if let shard { return try BatchShard(parsing: shard) }
            return try BatchShard.fromEnvironment(ProcessInfo.processInfo.environment, count: shardCount) ?? .all
        }
        if let migrations {
            options.migrations = try reportingErrors(json: outputOptions.json) { try SQLMigrationFolder(directory: FilePath(migrations)) }
        }
        if let plan {
            let shard = options.shard
            options.plan = try reportingErrors(json: outputOptions.json) { try BatchPlan(at: FilePath(plan), shard: shard) }
        }
        return options
    }

    /// The operator's lines about this worker's share: its shard, its plan, a Slurm array of one task.
    private func tellAboutShard(_ options: BatchOptions, root: FilePath, console: BatchConsole) {
        if options.shard.count > 1 { console.message("shard \(options.shard) (from \(options.shard.origin))") }
        if let plan = options.plan {
            console.message("taking the items from the plan \(plan.path): \(plan.shareItems) of its \(counted(plan.header.items, "item")) (of \(plan.header.root), made \(plan.header.createdAt.formatted(.iso8601)))")
            if plan.header.root != root.string {
                console.message("the plan was made from \(plan.header.root) and this run's root is \(root): its paths are taken relative to \(root)")
            }
        }
        let environment = ProcessInfo.processInfo.environment
        if shard == nil, shardCount == nil, environment["DOCCONVERT_SHARD_COUNT"] == nil,
           options.shard.origin == "SLURM_ARRAY_TASK_ID", options.shard.count == 1 {
            console.message("this Slurm array has one task, so it takes the whole tree; to rerun one task of a larger array, pass --shard-count (or DOCCONVERT_SHARD_COUNT) with the original array's size")
        }
    }

    /// `--plan-only`: walks once, writes the plan, prints what it holds.
    private func writePlan(to path: FilePath) throws {
        let json = outputOptions.json
        guard FileManager.default.fileExists(atPath: root) else {
            throw failure(ErrorJSON(code: DocumentError.Code.notFound.description,
                                    message: "\(root): no such file or folder; name the folder to plan"),
                          status: DocConvert.exitStatus(for: .notFound), json: json)
        }
        var options = BatchOptions()
        options.conversion.backupDirectory = backupDir.map { FilePath($0) }
        let batch = BatchConverter(root: FilePath(root), options: options)
        let console = BatchConsole(batch: batch, quiet: quiet, interval: progressInterval, printsItems: false,
                                   verbose: false, planning: true)
        let signals = SignalTrap { signal, isSecond in
            if isSecond { Foundation.exit(128 + signal) }
            console.message("stopping the walk: no plan is written")
            batch.cancel()
        }
        console.start()
        let header = try reportingErrors(json: json) {
            try batch.writePlan(to: path, generator: "docconvert \(ManagedDocumentVersion.string)")
        }
        console.stop()
        guard let header else { throw ExitCode(128 + (signals.received ?? SIGINT)) }
        if json {
            struct Written: Encodable { var plan: String; var header: BatchPlan.Header }
            try JSONOutput.print(Written(plan: path.string, header: header))
            return
        }
        print("plan: \(path): \(counted(header.items, "item")), \(counted(header.stores, "store")) to convert (\(formatBytes(UInt64(header.bytes)))) under \(header.root)")
        print("convert it with: docconvert batch \(root) --plan \(path) --shard K/N (or under a scheduler's array, as with a walk)")
    }

    /// What the console says on the first SIGINT or SIGTERM: how to abandon the items in progress, in the terms of
    /// the signal received (a terminal's Ctrl-C, or a second SIGTERM from a scheduler or `kill`).
    static func stoppingMessage(signal: Int32) -> String {
        let again = signal == SIGINT ? "Ctrl-C again" : "a second SIGTERM"
        return "stopping: items in progress finish, no new one starts (\(again) abandons them)"
    }

    /// Runs `body`, printing a report error as ``failure(_:status:json:)`` does, with exit status 73 whatever its
    /// code: the run has not started, and its report could not be kept where asked.
    private func reportingReportErrors<T>(json: Bool, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as DocumentError {
            throw failure(ErrorJSON(error), status: 73, json: json)
        }
    }
}

/// The symbolic links a run passed (never followed) and the stores whose legacy files it moved or deleted: a link to
/// one of them dangles once the run is over, and the run says so, naming the bundle to point it at.
final class DanglingLinks: Sendable {
    private struct Seen {
        var links: [String] = []
        var moved: [String: BatchItem] = [:]
    }

    private let seen = Protected(Seen())

    func add(_ item: BatchItem) {
        seen.withLock { seen in
            if item.outcome == .notAStore, item.kind == .symlink {
                seen.links.append(item.source)
            } else if item.outcome == .converted, let legacy = item.legacyFiles, legacy != "kept" {
                seen.moved[item.source] = item
            }
        }
    }

    /// One line per link under `root` whose target was a store this run converted and whose file is gone.
    func dangling(under root: FilePath) -> [String] {
        let seen = seen.withLock { $0 }
        guard !seen.moved.isEmpty else { return [] }
        return seen.links.sorted().compactMap { link in
            let path = root.pushing(FilePath(link))
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: path.string) else { return nil }
            var relative = path.removingLastComponent().pushing(FilePath(target)).lexicallyNormalized()
            guard !FileManager.default.fileExists(atPath: relative.string),
                  relative.removePrefix(root.lexicallyNormalized()), let item = seen.moved[relative.string] else { return nil }
            let place = item.legacyFiles == "deleted" ? "was deleted" : "was moved into \(item.legacyFiles ?? "the backup folder")"
            return "link \(link) -> \(target) now dangles: its target \(place) once it was converted into \(item.bundle ?? "a bundle"); point the link at the bundle, or remove it"
        }
    }
}
