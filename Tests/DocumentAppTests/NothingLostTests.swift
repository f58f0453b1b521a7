import Foundation
import GRDB
import ManagedDocument
import Synchronization
import SystemPackage
import TestSupport
import Testing

/// Counts of what an app saw: writes that returned success and writes that were refused.
private final class WriteLog: Sendable {
    private let stored = Mutex<(accepted: [Int], refused: Int)>(([], 0))
    func accept(_ value: Int) { stored.withLock { $0.accepted.append(value) } }
    func refuse() { stored.withLock { $0.refused += 1 } }
    var accepted: [Int] { stored.withLock { $0.accepted } }
    var refused: Int { stored.withLock { $0.refused } }
}

/// A flag set from one task and waited for in another.
private final class Flag: Sendable {
    private let value = Mutex(false)
    func set() { value.withLock { $0 = true } }
    var isSet: Bool { value.withLock { $0 } }
    func wait(timeout: Double = 120) async -> Bool {
        await eventually(timeout: timeout, every: 0.002) { isSet }
    }
}

/// The values of `note.n` in the bundle, read by a read-only open as another app would.
private func savedNotes(_ bundle: FilePath, folder: FilePath) async throws -> Set<Int> {
    var options = appOptions(folder)
    options.isReadOnly = true
    options.createIfMissing = false
    options.workingDirectory = folder.appending("readers")
    return try await Document.withDocument(at: bundle, options: options) { document in
        Set(try await document.reader.read { db in try Int.fetchAll(db, sql: "SELECT n FROM note") })
    }
}

/// The paths this process holds open under `folder` (from `/proc/self/fd`): a descriptor a failed open leaked, or
/// one closed twice and reused, shows here.
private func openDescriptors(under folder: FilePath) -> [String] {
    guard let names = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") else { return [] }
    return names.compactMap { name in
        guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(name)") else {
            return nil
        }
        return target.hasPrefix(folder.string) ? target : nil
    }
}

/// A document of `megabytes` MiB of incompressible rows (so a save takes a while), saved, with `note(n)`.
private func largeDocument(_ bundle: FilePath, folder: FilePath, megabytes: Int) async throws -> Document {
    let document = try await Document.open(at: bundle, options: appOptions(folder))
    try await document.writer.write { db in
        try db.execute(sql: "CREATE TABLE note(n INTEGER); CREATE TABLE filler(b BLOB)")
        for _ in 0..<megabytes { try db.execute(sql: "INSERT INTO filler(b) VALUES (randomblob(1048576))") }
    }
    try await document.save()
    return document
}

@Suite("Nothing lost, nothing exposed: close drains accepted writes, saves stay private, options cannot trap")
struct NothingLostTests {
    @Test("a write running when close() is called finishes, and its row is in the bundle")
    func writeRunningAtClose() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            let document = try await Document.open(at: bundle, options: appOptions(folder))
            try await document.writer.write { db in try db.execute(sql: "CREATE TABLE note(n INTEGER)") }
            try await document.save()
            let writer = try document.writer
            let started = Flag()
            let write = Task {
                try await writer.write { db in
                    try db.execute(sql: "INSERT INTO note(n) VALUES (1)")
                    started.set()
                    usleep(300_000)  // a write that takes a few hundred milliseconds
                    try db.execute(sql: "INSERT INTO note(n) VALUES (2)")
                }
            }
            #expect(await started.wait())
            try await document.close()
            try await write.value  // it reported success...
            #expect(try await savedNotes(bundle, folder: folder) == [1, 2])  // ...so the bundle has it
            #expect(document.state == .closed)
        }
    }

    @Test("writes that arrive while close() saves are either refused or in the bundle, never lost")
    func writesDuringFinalSave() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            let document = try await largeDocument(bundle, folder: folder, megabytes: 24)
            let writer = try document.writer
            try await writer.write { db in try db.execute(sql: "INSERT INTO note(n) VALUES (0)") }
            let log = WriteLog()
            let writing = Flag()
            let writes = Task {
                var value = 1
                while !Task.isCancelled {
                    let current = value
                    do {
                        try await writer.write { db in try db.execute(sql: "INSERT INTO note(n) VALUES (?)", arguments: [current]) }
                        log.accept(value)
                        writing.set()
                    } catch {
                        log.refuse()
                        return
                    }
                    value += 1
                }
            }
            #expect(await writing.wait())
            try await document.close()
            // The loop writes until a write is refused; it is cancelled only if none ever is.
            #expect(await eventually { log.refused == 1 }, "the writes after close were not refused")
            writes.cancel()
            await writes.value
            let saved = try await savedNotes(bundle, folder: folder)
            let lost = Set(log.accepted).union([0]).subtracting(saved)
            #expect(lost.isEmpty, "accepted writes lost at close: \(lost.sorted().prefix(10)) of \(log.accepted.count)")
            #expect(throws: DocumentError.self) { _ = try document.writer }
        }
    }

    @Test("a private bundle's temporary is never readable by others while it is saved or converted")
    func temporariesArePrivate() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Private.mdz")
            let document = try await largeDocument(bundle, folder: folder, megabytes: 32)
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: bundle.string)
            try await document.writer.write { db in
                try db.execute(sql: "UPDATE filler SET b = randomblob(1048576)")  // every segment changes
            }
            let modes = try await watchTemporaries(in: folder) { try await document.save() }
            #expect(!modes.isEmpty, "no temporary was seen during the save")
            #expect(modes.allSatisfy { $0 == 0o600 }, "temporary modes seen: \(Set(modes).map { String($0, radix: 8) })")
            #expect(try mode(of: bundle).permissions == 0o600)
            try await document.close()

            // A conversion of a private legacy store: its bundle's temporary is as private as the store.
            let store = folder.appending("Diary.sqlite")
            let queue = try DatabaseQueue(path: store.string)
            try await queue.write { db in
                try db.execute(sql: "CREATE TABLE entry(b BLOB)")
                for _ in 0..<24 { try db.execute(sql: "INSERT INTO entry VALUES (randomblob(1048576))") }
            }
            try queue.close()
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: store.string)
            var conversion = ConversionOptions()
            conversion.legacyPolicy = .keep
            let converted = try await watchTemporaries(in: folder) {
                _ = try LegacyConverter(options: conversion).convert(storeAt: store)
            }
            #expect(!converted.isEmpty, "no temporary was seen during the conversion")
            #expect(converted.allSatisfy { $0 == 0o600 }, "temporary modes seen: \(Set(converted).map { String($0, radix: 8) })")
        }
    }

    @Test("a private bundle extracted (a folder, or a loose store) gives files as private as the bundle")
    func extractionStaysPrivate() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Private.mdz")
            let document = try await Document.open(at: bundle, options: appOptions(folder))
            try await document.writer.write { db in try db.execute(sql: "CREATE TABLE t(x); INSERT INTO t VALUES (1)") }
            try await document.close()
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: bundle.string)
            let reader = try BundleReader(at: bundle)
            let extracted = try reader.extract(into: folder.appending("out"))
            #expect(try mode(of: extracted.store).permissions == 0o600)
            let loose = try reader.extractStore(to: folder.appending("Private.sqlite"))
            #expect(try mode(of: loose.store).permissions == 0o600)
            // A bundle others may read extracts as before (0644 less the umask).
            try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: bundle.string)
            let shared = try BundleReader(at: bundle).extract(into: folder.appending("shared"))
            #expect(try mode(of: shared.store).permissions == 0o644 & ~currentUmask())
        }
    }

    @Test("options out of range are refused at open with invalidArgument, never a trap", arguments: [
        "autosave 1e12", "autosave nan", "autosave inf", "autosave -1", "autosave 0",
        "lock -1", "lock nan", "lock inf", "lock 1e300", "busy 1e12", "busy -1", "busy nan", "level 0",
        "entries -1", "names -5",
    ])
    func absurdOptions(option: String) async throws {
        try await withTemporaryDirectory { folder in
            let parts = option.split(separator: " ")
            let value = Double(parts[1]) ?? (parts[1] == "nan" ? .nan : .infinity)
            var options = appOptions(folder)
            switch parts[0] {
            case "autosave": options.autosaveInterval = value
            case "lock": options.lockTimeout = value
            case "busy": options.conversion.busyTimeout = value
            case "entries": options.limits.maxEntryCount = Int(value)
            case "names": options.limits.maxNameLength = Int(value)
            default: options.saving = WritingOptions(compression: .deflate(level: Int(value)))
            }
            let bundle = folder.appending("Notes.mdz")
            do {
                let document = try await Document.open(at: bundle, options: options)
                try await document.close()
                Issue.record("\(option) was accepted")
            } catch let error as DocumentError {
                #expect(error.code == .invalidArgument, "\(option): \(error)")
            }
            #expect(!FileManager.default.fileExists(atPath: bundle.string), "\(option): something was written")
        }
    }

    @Test("saving options set whole, as the docs show, change the compression only: every save still replaces the bundle")
    func savingOptionsSetWhole() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            var options = appOptions(folder)
            options.saving = WritingOptions(compression: .store)
            let document = try await Document.open(at: bundle, options: options)
            for note in 1...2 {
                try await document.writer.write { db in
                    try db.execute(sql: "CREATE TABLE IF NOT EXISTS note(n INTEGER)")
                    try db.execute(sql: "INSERT INTO note(n) VALUES (?)", arguments: [note])
                }
                try await document.save()
                #expect(document.state == .normal)
                #expect(document.lastSaveError == nil)
            }
            try await document.close()
            let content = try await bundleContent(bundle, folder: folder)
            #expect(content.tables["note"]?.hasPrefix("2:") == true, "\(content)")
            #expect(try BundleReader(at: bundle).entries.allSatisfy { !$0.isCompressed }, "the saves stored every entry")
        }
    }

    @Test("replacing is an argument of the write: without it an existing file stays and is named; with it, replaced")
    func replacingIsAnArgument() async throws {
        try await withTemporaryDirectory { folder in
            let store = folder.appending("store.sqlite")
            let queue = try DatabaseQueue(path: store.string)
            try await queue.write { db in try db.execute(sql: "CREATE TABLE note(n INTEGER); INSERT INTO note VALUES (1)") }
            try queue.close()
            let target = folder.appending("Notes.mdz")
            let notABundle = Data("a file the user keeps".utf8)
            try notABundle.write(to: URL(fileURLWithPath: target.string))
            var options = WritingOptions(compression: .store)
            options.compressionThreads = 1
            let error = #expect(throws: DocumentError.self) {
                try BundleWriter.write(BundleContent(store: store), metadata: DocumentMetadata(), to: target, options: options)
            }
            #expect(error?.code == .alreadyExists)
            #expect(error?.path == target)
            #expect(try Data(contentsOf: URL(fileURLWithPath: target.string)) == notABundle)
            for _ in 1...2 {
                try BundleWriter.write(BundleContent(store: store), metadata: DocumentMetadata(), to: target,
                                       replacingExisting: true, options: options)
                #expect(try Document.metadata(at: target).store.size > 0)
            }
            #expect(try FileManager.default.contentsOfDirectory(atPath: folder.string).sorted() == ["Notes.mdz", "store.sqlite"])
        }
    }

    @Test("a save that fails while the document opens closes each descriptor once (strace sees no EBADF)",
          .enabled(if: Tools.straceUnavailable == nil, Comment(rawValue: Tools.straceUnavailable ?? "")))
    func failedSaveAtOpenUnderStrace() async throws {
        try await withTemporaryDirectory { folder in
            // > This test binary again, running only the scenario below, with every close(2) it makes traced.
            let trace = folder.appending("close.trace")
            let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/strace")
            process.arguments = ["-f", "-e", "trace=close", "-o", trace.string, executable,
                                 "--testing-library", "swift-testing", "--filter", "NothingLostTests/failedSaveAtOpen\\(\\)"]
            // > Under AddressSanitizer the child's exit status would also count leaks at exit (XCTest's own).
            process.environment = ProcessInfo.processInfo.environment.merging(["ASAN_OPTIONS": "detect_leaks=0"]) { $1 }
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            process.waitUntilExit()
            let traced = (try? String(contentsOfFile: trace.string, encoding: .utf8)) ?? ""
            try #require(traced.contains("close("), "strace traced no close(2) (status \(process.terminationStatus))")
            #expect(process.terminationStatus == 0, "the traced scenario failed")
            let twice = traced.split(separator: "\n").filter { $0.contains("EBADF") }
            #expect(twice.isEmpty, "descriptors closed twice: \(twice)")
        }
    }

    @Test("a save that fails while the document opens releases the lock and the working copy once, leaking nothing")
    func failedSaveAtOpen() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            var first = appOptions(folder)
            first.migrations = DocumentMigrator(modelName: "Notes", modelVersion: "1")
            try await Document.open(at: bundle, options: first).close()
            let before = try Data(contentsOf: URL(fileURLWithPath: bundle.string))

            // Version 2's migration needs a save at open. While it runs, the bundle's name is taken by a folder
            // (another program's doing): the save cannot put a file there, and fails.
            let away = folder.appending("Notes.away")
            func version2(takingTheName: Bool) -> DocumentMigrator {
                var migrator = DocumentMigrator(modelName: "Notes", modelVersion: "2")
                migrator.registerMigration("add note") { db in
                    try db.execute(sql: "CREATE TABLE note(n INTEGER)")
                    guard takingTheName else { return }
                    struct NameNotTaken: Error {}
                    guard rename(bundle.string, away.string) == 0, mkdir(bundle.string, 0o755) == 0 else {
                        throw NameNotTaken()
                    }
                }
                return migrator
            }
            var failing = appOptions(folder)
            failing.migrations = version2(takingTheName: true)
            let error = await #expect(throws: DocumentError.self) { _ = try await Document.open(at: bundle, options: failing) }
            #expect(error?.path == bundle, "the save's error names the bundle: \(String(describing: error))")
            #expect(openDescriptors(under: folder).isEmpty, "left open: \(openDescriptors(under: folder))")
            let working = (try? FileManager.default.contentsOfDirectory(atPath: folder.appending("working").string)) ?? []
            #expect(working.isEmpty, "working copies left: \(working)")
            #expect(rmdir(bundle.string) == 0, "the folder in the bundle's place holds nothing the save left")
            #expect(rename(away.string, bundle.string) == 0)
            #expect(try Data(contentsOf: URL(fileURLWithPath: bundle.string)) == before, "the bundle changed")

            // The lock is free: the same migration opens and saves once nothing is in the bundle's way.
            var retry = appOptions(folder)
            retry.migrations = version2(takingTheName: false)
            let document = try await Document.open(at: bundle, options: retry)
            #expect(document.appliedMigrations == ["add note"])
            try await document.close()
        }
    }

    @Test("a read-only open that fails after taking its working folder leaks no descriptor")
    func failedReadOnlyOpen() async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            let document = try await Document.open(at: bundle, options: appOptions(folder))
            try await document.writer.write { db in
                try db.execute(sql: "CREATE TABLE note(t TEXT)")
                for index in 0..<200 { try db.execute(sql: "INSERT INTO note VALUES (?)", arguments: ["note \(index)"]) }
            }
            try await document.close()
            // One byte of the small store's deflated data flipped: the open fails while it checks the store (served
            // whole from memory) or, with a limit that makes it extract the store, while it extracts.
            let flip = """
            import sys, zipfile
            path = sys.argv[1]
            with zipfile.ZipFile(path) as z:
                info = z.getinfo('StoreContent/persistentStore')
            data = bytearray(open(path, 'rb').read())
            start = info.header_offset + 30 + int.from_bytes(data[info.header_offset + 26:info.header_offset + 28], 'little') \\
                + int.from_bytes(data[info.header_offset + 28:info.header_offset + 30], 'little')
            data[start + info.compress_size // 2] ^= 0x55
            open(path, 'wb').write(data)
            """
            try Python.run(flip, [bundle.string])
            for extracting in [false, true] {
                var options = appOptions(folder)
                options.isReadOnly = true
                if extracting { options.limits.maxRestartSegmentSize = 1 }
                let error = await #expect(throws: DocumentError.self) {
                    _ = try await Document.open(at: bundle, options: options)
                }
                #expect([.checksumMismatch, .corruptArchive, .sizeMismatch].contains(error?.code), "\(String(describing: error))")
                #expect(openDescriptors(under: folder).isEmpty, "left open: \(openDescriptors(under: folder))")
            }
        }
    }

    @Test("closed is final: a save or revert in flight when close(savingChanges: false) is called never reopens the state")
    func closedIsFinal() async throws {
        try await withTemporaryDirectory { folder in
            for round in 0..<4 {
                let bundle = folder.appending("Notes-\(round).mdz")
                let document = try await largeDocument(bundle, folder: folder, megabytes: 16)
                try await document.writer.write { db in try db.execute(sql: "UPDATE filler SET b = randomblob(1048576)") }
                let inFlight = Task {
                    if round % 2 == 0 { try await document.save() } else { try await document.revert() }
                }
                try? await Task.sleep(nanoseconds: UInt64(round) * 5_000_000)
                try await document.close(savingChanges: false)
                #expect(document.state == .closed)
                _ = try? await inFlight.value
                #expect(document.state == .closed, "round \(round): \(document.state) after close")
                #expect(throws: DocumentError.self) { _ = try document.writer }
            }
        }
    }
}

/// Runs `body` while another thread lists `folder` for `.partial` temporaries over and over, and returns the
/// permission bits of every one it saw (by `stat`, as another user's process would find them).
private func watchTemporaries(in folder: FilePath, while body: () async throws -> Void) async throws -> [UInt32] {
    let done = Flag()
    let seen = ModeLog()
    let watcher = Thread {
        while !done.isSet {
            for name in (try? FileManager.default.contentsOfDirectory(atPath: folder.string)) ?? []
            where name.hasSuffix(".partial") {
                var info = stat()
                if stat(folder.appending(name).string, &info) == 0 {
                    seen.append(UInt32(info.st_mode) & 0o777)
                }
            }
        }
    }
    watcher.start()
    defer { done.set() }
    try await body()
    done.set()
    try? await Task.sleep(nanoseconds: 20_000_000)
    return seen.all
}

private final class ModeLog: Sendable {
    private let modes = Mutex<[UInt32]>([])
    func append(_ mode: UInt32) { modes.withLock { $0.append(mode) } }
    var all: [UInt32] { modes.withLock { $0 } }
}
