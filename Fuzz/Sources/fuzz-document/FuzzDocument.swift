// A valid bundle whose DocumentMetadata.json has some of its numbers and strings replaced (the JSON stays valid, the
// zip stays right, the store's bytes stay as written), driven through everything that trusts the metadata:
// BundleReader's open, verifyEntries and verify(full:), extraction, BundleStore reading in place (every row of every
// table), and Document.open read-only and for writing (saving a change when the input asks). See MetadataMutation
// for how the input's bytes become edits, and DocumentTemplate for the bundles edited.
import Foundation
import FuzzSupport
import GRDB
@_spi(Core) import MDZCore
@testable import ManagedDocument
import SystemPackage

private let scratch = FuzzScratch("document")
private let templates: [DocumentTemplate] = {
    do { return try DocumentTemplate.makeAll(in: scratch.folder.appending("templates")) } catch {
        fatalError("cannot write the template bundles: \(error)")
    }
}()

@_cdecl("fuzz_document_main")
public func fuzzMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> Int32 {
    _ = templates  // written before the first input, so its time is not counted against one
    return runFuzzer(argc, argv) { data, size in fuzzDocument(data ?? UnsafePointer(bitPattern: 1)!, size) }
}

/// With FUZZ_DOCUMENT_PRINT=1 in the environment, each input's template and edits are printed before it runs, then
/// each step's outcome (for reading a finding: `fuzz-document: large-deflated: store.segments.interval =
/// 9223372036854775807, with digests to match`).
private let printsEdits = ProcessInfo.processInfo.environment["FUZZ_DOCUMENT_PRINT"] != nil

func fuzzDocument(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let mutation = MetadataMutation(Array(UnsafeBufferPointer(start: data, count: size)), templates: templates)
    let template = templates[mutation.template]
    report("fuzz-document: \(template.name)\(mutation.saves ? ", saved" : ""): "
           + (mutation.log.isEmpty ? "no edits" : mutation.log.joined(separator: "; ")))
    let bundle = scratch.write(template.bundle(metadata: mutation.metadata.encoded), named: "Document.mdz")
    let work = scratch.folder.appending("work")
    try? FileSystem.createDirectory(work, mode: 0o700)
    defer {
        // > Nothing of an input is left behind: the next one starts with an empty working folder.
        try? FileSystem.removeTree(work)
        try? FileSystem.removeFile(bundle)
    }

    var limits = ReadingLimits()
    limits.maxTotalUncompressedSize = 16 << 20  // the templates' stores are under 2 MiB: keep each input bounded
    guard let reader = step("open", { try BundleReader(at: bundle, limits: limits) }) else { return 0 }
    _ = reader.notices
    step("verifyEntries") { try reader.verifyEntries() }
    step("verify(full: true)") { try reader.verify(full: true, workingDirectory: work) }
    let extracted = work.appending("extracted")
    step("extract") { try reader.extract(into: extracted) }
    try? FileSystem.removeTree(extracted)  // Squash cleanup error: the next input removes the folder again.

    if let store = step("BundleStore", { try BundleStore(at: bundle, limits: limits, workingDirectory: work) }) {
        step("BundleStore read, \(store.access)") { try store.read(scanEveryTable) }
        _ = store.cacheStatistics
        store.close()
    }

    var options = Document.OpenOptions()
    options.limits = limits
    options.workingDirectory = work.appending("copies")
    var readOnly = options
    readOnly.isReadOnly = true
    waitFor { [readOnly] in
        guard let document = await step("Document.open read-only", {
            try await Document.open(at: bundle, options: readOnly)
        }) else { return }
        await step("read-only read") { try await document.reader.read(scanEveryTable) }
        try? await document.close(savingChanges: false)  // Squash close error: a read-only close saves nothing.
    }
    let saves = mutation.saves
    waitFor { [options] in
        guard let document = await step("Document.open", { try await Document.open(at: bundle, options: options) })
        else { return }
        await step("read") { try await document.reader.read(scanEveryTable) }
        if saves {
            await step("save") {
                try await document.writer.write { db in
                    try db.execute(sql: "CREATE TABLE IF NOT EXISTS fuzz(value); INSERT INTO fuzz VALUES (1)")
                }
                try await document.save()
            }
        }
        await step("close") { try await document.close(savingChanges: false) }
    }
    return 0
}

/// Runs one step of an input; what it throws is a normal result here (a refusal of the edited metadata), printed
/// with FUZZ_DOCUMENT_PRINT.
@discardableResult
private func step<T>(_ name: String, _ body: () throws -> T) -> T? {
    do {
        let value = try body()
        report("  \(name): ok")
        return value
    } catch {
        report("  \(name): \(error)")
        return nil
    }
}

@discardableResult
private func step<T>(_ name: String, _ body: () async throws -> T) async -> T? {
    do {
        let value = try await body()
        report("  \(name): ok")
        return value
    } catch {
        report("  \(name): \(error)")
        return nil
    }
}

/// Reads every row of every table, so each page of the store is asked for.
private func scanEveryTable(_ db: Database) throws -> Int {
    let tables = try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table'")
    var rows = 0
    for table in tables {
        let cursor = try Row.fetchCursor(db, sql: "SELECT * FROM \(table.quotedDatabaseIdentifier)")
        while try cursor.next() != nil { rows += 1 }
    }
    return rows
}

/// Prints a line to stderr (unbuffered: the line is out before a trap) with FUZZ_DOCUMENT_PRINT.
private func report(_ line: @autoclosure () -> String) {
    if printsEdits { FileHandle.standardError.write(Data((line() + "\n").utf8)) }
}

/// Runs `body` to its end from libFuzzer's thread (which is not one of Swift's).
private func waitFor(_ body: @escaping @Sendable () async -> Void) {
    let done = DispatchSemaphore(value: 0)
    Task {
        await body()
        done.signal()
    }
    done.wait()
}
