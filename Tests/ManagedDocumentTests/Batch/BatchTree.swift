import Foundation
import GRDB
import LegacySamples
import SystemPackage
import TestSupport
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

/// A generated tree for batch tests: every kind of legacy store (the five samples per group, in nested folders),
/// copies under odd names and without extensions, a hidden folder, and things that only look like stores or must
/// not be touched: text named `.sqlite`, empty files, orphan sidecars, symbolic links, native bundles, and corrupt
/// stores. `expected` says what `docconvert batch` must report for each item, and what SQLite reads from each store.
struct BatchTree {
    struct Store {
        var kind: String
        /// The file whose row digests SQLite reads (the store, or a package's StoreContent/persistentStore).
        var storeFile: String
        var digests: [String: String]
        /// The bundles it may become, relative to the root: `STEM.mdz`, or `NAME.mdz` when a sibling with the same
        /// stem took that name first.
        var bundles: [String]
    }

    let root: FilePath
    /// Relative source path → store, for every item that must be converted.
    var stores: [String: Store] = [:]
    /// Relative path → outcome, for every other item (`not-a-store`, `failed`).
    var others: [String: String] = [:]
    /// Relative path → SHA-256, for every file that must never change (not stores, corrupt stores).
    var untouched: [String: String] = [:]

    var expectedOutcomes: [String: String] {
        var all = others
        for path in stores.keys { all[path] = "converted" }
        return all
    }

    init(in root: FilePath, groups: Int) throws {
        self.root = root
        let manager = FileManager.default
        let taste = root.appending(".template")
        try manager.createDirectory(atPath: taste.string, withIntermediateDirectories: true)
        defer { try? manager.removeItem(atPath: taste.string) }  // Squash cleanup error of the template folder.
        let tasteSample = try LegacySamples.makeTasteStore(in: taste)
        let tasteFile = taste.appending(tasteSample.source)

        for group in 0..<groups {
            let nesting = ["", "/deep", "/deep/er", "/deep/er/still"][group % 4]
            let relativeFolder = "g\(group)\(nesting)"
            let folder = root.appending(relativeFolder)
            try manager.createDirectory(atPath: folder.string, withIntermediateDirectories: true)
            for sample in try LegacySamples.makeAll(in: folder) {
                let storeFile = sample.kind == "uimanageddocument-package"
                    ? "\(sample.source)/StoreContent/persistentStore" : sample.source
                try addStore(relativeFolder, sample.source, kind: sample.kind, storeFile: storeFile)
            }
            switch group % 5 {
            case 0:
                try copy(tasteFile, to: "\(relativeFolder)/odd név (\(group)) café.db")
            case 1:
                try copy(tasteFile, to: "\(relativeFolder)/no-extension-\(group)")
                // Two stores with the same stem: both convert, into Twin.mdz and Twin.<ext>.mdz.
                try copy(tasteFile, to: "\(relativeFolder)/Twin.sqlite")
                try copy(tasteFile, to: "\(relativeFolder)/Twin.db")
            case 2:
                try write(Data("SELECT * FROM notes; -- not a database\n".utf8), to: "\(relativeFolder)/notes.sqlite",
                          outcome: "not-a-store")
                try write(Data(), to: "\(relativeFolder)/empty.db", outcome: "not-a-store")
            case 3:
                var generator = SeededGenerator(seed: UInt64(group))
                let noise = Data((0..<4096).map { _ in UInt8.random(in: 0...255, using: &generator) })
                try write(noise, to: "\(relativeFolder)/ghost.sqlite-wal", outcome: "not-a-store")
                // A store cut short after its header: SQLite refuses it, it stays as it was.
                let ledger = try Data(contentsOf: URL(fileURLWithPath: folder.appending("Ledger.sqlite").string))
                try write(ledger.prefix(6000), to: "\(relativeFolder)/broken.sqlite", outcome: "failed")
                try write(Data("SQLite format 3\0".utf8) + noise, to: "\(relativeFolder)/garbage.db", outcome: "failed")
            default:
                try manager.createSymbolicLink(atPath: folder.appending("link.sqlite").string,
                                               withDestinationPath: "TasteB.sqlite")
                others["\(relativeFolder)/link.sqlite"] = "not-a-store"
                try Fixtures.makeBundle(at: folder.appending("Native.mdz"), rows: 20)
                untouched["\(relativeFolder)/Native.mdz"] = try FileDigest(of: folder.appending("Native.mdz")).sha256
                others["\(relativeFolder)/Native.mdz"] = "not-a-store"
            }
        }
        // Hidden folders are searched too: apps keep stores in them.
        try manager.createDirectory(atPath: root.appending(".config/app").string, withIntermediateDirectories: true)
        try copy(tasteFile, to: ".config/app/data.sqlite")
    }

    private mutating func addStore(_ folder: String, _ source: String, kind: String, storeFile: String) throws {
        let relative = folder.isEmpty ? source : "\(folder)/\(source)"
        let stem = FilePath(source).stem ?? source
        stores[relative] = Store(kind: kind, storeFile: "\(folder)/\(storeFile)",
                                 digests: try Fixtures.digestsAsSQLiteReads(root.appending("\(folder)/\(storeFile)")),
                                 bundles: ["\(stem).mdz", "\(source).mdz"].map { folder.isEmpty ? $0 : "\(folder)/\($0)" })
    }

    private mutating func copy(_ file: FilePath, to relative: String) throws {
        try FileManager.default.copyItem(atPath: file.string, toPath: root.appending(relative).string)
        let path = FilePath(relative)
        let folder = path.removingLastComponent().string
        try addStore(folder, path.lastComponent!.string, kind: "coredata-sqlite", storeFile: path.lastComponent!.string)
    }

    private mutating func write(_ data: Data, to relative: String, outcome: String) throws {
        try data.write(to: URL(fileURLWithPath: root.appending(relative).string))
        others[relative] = outcome
        untouched[relative] = try FileDigest(of: root.appending(relative)).sha256
    }

    /// Files below the root whose names say they are temporaries or locks of a writer.
    func leftovers() -> [String] {
        var found: [String] = []
        let enumerator = FileManager.default.enumerator(atPath: root.string)
        while let relative = enumerator?.nextObject() as? String {
            let name = FilePath(relative).lastComponent?.string ?? ""
            if name.hasSuffix(".partial") || name.hasSuffix(".partial.d") || name.hasSuffix(".lock") {
                found.append(relative)
            }
        }
        return found
    }
}

extension BatchReport {
    static func read(_ path: FilePath) throws -> BatchReport { try read(from: path) }

    /// A report printed by `--json`.
    static func decode(_ text: String) throws -> BatchReport {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return try decoder.decode(BatchReport.self, from: Data(text.utf8))
    }

    /// Relative source → outcome; fails on an item listed twice.
    func outcomes() throws -> [String: String] {
        var result: [String: String] = [:]
        for item in items {
            guard result.updateValue(item.outcome.rawValue, forKey: item.source) == nil else {
                throw ReportProblem(description: "\(item.source) is listed twice")
            }
        }
        return result
    }
}

struct ReportProblem: Error, CustomStringConvertible { var description: String }

/// `docconvert` run as a child process, as an operator would.
final class BatchProcess: @unchecked Sendable {
    let process = Process()
    private let out = Pipe()
    private let err = Pipe()
    private(set) var stdout = ""

    init(_ arguments: [String], environment: [String: String] = [:]) throws {
        process.executableURL = URL(fileURLWithPath: builtProduct("docconvert"))
        process.arguments = ["batch"] + arguments
        process.environment = ProcessInfo.processInfo.environment
            .filter { !$0.key.hasPrefix("SLURM_") && $0.key != "JOB_COMPLETION_INDEX" && $0.key != "DOCCONVERT_SHARD_COUNT" }
            .merging(environment) { $1 }
        process.standardOutput = out
        process.standardError = err
        try process.run()
    }

    /// Reads stdout until `count` lines start with `prefix`; false when the process ended first.
    func waitForLines(startingWith prefix: String, count: Int) -> Bool {
        while stdout.split(separator: "\n").filter({ $0.hasPrefix(prefix) }).count < count {
            let data = out.fileHandleForReading.availableData
            if data.isEmpty { return false }
            stdout += String(decoding: data, as: UTF8.self)
        }
        return true
    }

    func finish() -> (status: Int32, stdout: String, stderr: String) {
        let group = DispatchGroup()
        nonisolated(unsafe) var stderr = Data()
        group.enter()
        DispatchQueue.global().async { [err] in
            stderr = err.fileHandleForReading.readDataToEndOfFile()
            group.leave()
        }
        stdout += String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        group.wait()
        process.waitUntilExit()
        return (process.terminationStatus, stdout, String(decoding: stderr, as: UTF8.self))
    }

    static func run(_ arguments: [String], environment: [String: String] = [:]) throws -> (status: Int32, stdout: String, stderr: String) {
        try BatchProcess(arguments, environment: environment).finish()
    }
}
