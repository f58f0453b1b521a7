import Dispatch
import Foundation
@_spi(Core) import MDZCore
import ManagedDocument

/// Item lines on stdout, progress on stderr (a live line on a terminal, plain lines elsewhere), the summary table.
final class BatchConsole: Sendable {
    private let batch: BatchConverter
    private let quiet: Bool
    private let interval: Double
    private let printsItems: Bool
    private let verbose: Bool
    /// A `--plan-only` walk: the progress line counts what was found.
    private let planning: Bool
    private let isTerminal = isatty(STDERR_FILENO) == 1
    /// What the console has shown so far, behind one lock: items arrive from several threads.
    private struct Shown {
        var timer: (any DispatchSourceTimer)?
        var liveLineShown = false
        var failures = 0
    }
    private let shown = Protected(Shown())

    init(batch: BatchConverter, quiet: Bool, interval: Double, printsItems: Bool, verbose: Bool, planning: Bool = false) {
        self.planning = planning
        self.batch = batch
        self.quiet = quiet
        self.interval = interval
        self.printsItems = printsItems
        self.verbose = verbose
    }

    func start() {
        guard !quiet else { return }
        let period = isTerminal ? 0.25 : interval
        shown.withLock { shown in
            let timer = DispatchSource.makeTimerSource(queue: .global())
            timer.schedule(deadline: .now() + period, repeating: period)
            timer.setEventHandler { [weak self] in self?.tick() }
            timer.resume()
            shown.timer = timer
        }
    }

    func stop() {
        shown.withLock { shown in
            shown.timer?.cancel()
            Self.clearLiveLine(&shown)
        }
    }

    /// A line for the operator on stderr.
    func message(_ text: String) {
        shown.withLock { shown in
            Self.clearLiveLine(&shown)
            FileHandle.standardError.write(Data("docconvert: \(text)\n".utf8))
        }
    }

    func item(_ item: BatchItem) {
        shown.withLock { shown in
            if item.outcome == .failed || item.outcome == .busy { shown.failures += 1 }
            guard printsItems, verbose || item.outcome != .notAStore else { return }
            Self.clearLiveLine(&shown)
            FileHandle.standardOutput.write(Data((Self.line(for: item) + "\n").utf8))  // unbuffered: in order with stderr
        }
    }

    static func line(for item: BatchItem) -> String {
        let label = item.outcome.rawValue.padding(toLength: 21, withPad: " ", startingAt: 0)
        switch item.outcome {
        case .converted:
            var facts = [item.kind.description, "\(formatBytes(UInt64(item.bytesIn))) -> \(formatBytes(UInt64(item.bytesOut)))"]
            if let rows = item.rows { facts.append(counted(rows, "row")) }
            if let legacy = item.legacyFiles { facts.append(legacy == "kept" || legacy == "deleted" ? "legacy \(legacy)" : "legacy in \(legacy)") }
            if let applied = item.migrationsApplied, !applied.isEmpty { facts.append("migrated \(applied.joined(separator: ", "))") }
            return "\(label) \(item.source) -> \(item.bundle ?? "?") (\(facts.joined(separator: ", ")))"
        case .alreadyDone:
            var line = "\(label) \(item.source) -> \(item.bundle ?? "?")"
            if let applied = item.migrationsApplied, !applied.isEmpty { line += " (migrated \(applied.joined(separator: ", ")))" }
            return line
        case .wouldConvert:
            return "\(label) \(item.source) -> \(item.bundle ?? "?") (\(item.kind), \(formatBytes(UInt64(item.bytesIn))))"
        case .notAStore:
            return "\(label) \(item.source): \(item.reason ?? "not a store")"
        case .busy, .failed:
            // The message names the file relative to the root; when that is the item itself it is said once.
            var message = item.error?.message ?? "failed"
            if message.hasPrefix(item.source + ": ") { message.removeFirst(item.source.count + 2) }
            return "\(label) \(item.source): \(message)"
        }
    }

    private func tick() {
        let progress = batch.progress
        shown.withLock { shown in show(progress, &shown) }
    }

    private func show(_ progress: BatchProgress, _ shown: inout Shown) {
        let failures = shown.failures
        let elapsed = max(0.001, Date().timeIntervalSince(progress.startedAt))
        let rate = Double(progress.done) / elapsed
        let byteRate = Double(progress.doneBytes) / elapsed
        var text: String
        if planning {
            text = "planning: \(progress.found) items found (\(formatBytes(UInt64(progress.foundBytes))) of stores), \(String(format: "%.0f", Double(progress.found) / elapsed)) items/s"
        } else if let total = progress.total {
            let mark = total.isFinal ? "" : "~"
            text = "\(progress.done)/\(mark)\(total.items) items"
            text += ", \(formatBytes(UInt64(progress.doneBytes))) of \(mark)\(formatBytes(UInt64(total.bytes)))"
            text += String(format: ", %.1f items/s, %@/s", rate, formatBytes(UInt64(byteRate)))
            if failures > 0 { text += ", \(failures) failed or busy" }
            if byteRate > 0, total.bytes > progress.doneBytes {
                text += ", ETA \(mark)\(Self.duration(Double(total.bytes - progress.doneBytes) / byteRate))"
            }
        } else {
            text = "\(progress.done) items, \(formatBytes(UInt64(progress.doneBytes)))"
            text += String(format: ", %.1f items/s, %@/s", rate, formatBytes(UInt64(byteRate)))
            if failures > 0 { text += ", \(failures) failed or busy" }
            text += ", counting (\(max(progress.surveyed, progress.found)) found so far)"
        }
        if isTerminal {
            FileHandle.standardError.write(Data("\r\u{1B}[K\(text)".utf8))
            shown.liveLineShown = true
        } else {
            FileHandle.standardError.write(Data("progress: \(text)\n".utf8))
        }
    }

    private static func clearLiveLine(_ shown: inout Shown) {
        guard shown.liveLineShown else { return }
        FileHandle.standardError.write(Data("\r\u{1B}[K".utf8))
        shown.liveLineShown = false
    }

    static func duration(_ seconds: Double) -> String {
        let total = Int(seconds.rounded())
        return total >= 3600 ? String(format: "%d:%02d:%02d", total / 3600, total / 60 % 60, total % 60)
            : String(format: "%d:%02d", total / 60, total % 60)
    }

    /// The summary table; `listsNotStores`: the items that are not stores were printed (else the line says how).
    func printSummary(_ summary: BatchSummary, dryRun: Bool, listsNotStores: Bool) {
        var rows: [(String, String)] = []
        let outcomes: [BatchItem.Outcome] = dryRun ? [.wouldConvert, .alreadyDone, .notAStore, .failed]
            : [.converted, .alreadyDone, .notAStore, .busy, .failed]
        for outcome in outcomes {
            let count = summary.count(outcome)
            let hint = outcome == .notAStore && count > 0 && !listsNotStores ? " (--verbose lists them and why)" : ""
            rows.append((outcome.rawValue, "\(count)\(hint)"))
        }
        rows.append(("items", "\(summary.items)"))
        rows.append(("bytes in", formatBytes(UInt64(summary.bytesIn))))
        if !dryRun { rows.append(("bytes out", formatBytes(UInt64(summary.bytesOut)))) }
        let rate = summary.duration > 0 ? Double(summary.items) / summary.duration : 0
        rows.append(("time", String(format: "%.2f s (%.1f items/s)", summary.duration, rate)))
        let width = rows.map(\.0.count).max() ?? 0
        print(dryRun ? "\nplan (dry run, nothing changed):" : "\nsummary\(summary.interrupted ? " (interrupted: run again to finish)" : ""):")
        for (name, value) in rows { print("  \(name.padding(toLength: width, withPad: " ", startingAt: 0))  \(value)") }
    }
}
