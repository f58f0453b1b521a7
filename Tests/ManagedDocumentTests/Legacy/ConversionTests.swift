import Crypto
import Foundation
import GRDB
import LegacySamples
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

@Suite("Legacy stores convert into bundles with zero loss")
struct ConversionTests {
    static let sampleNames = ["TasteB", "minimalTime", "Diary", "Recipes", "Ledger"]

    private func keepOptions() -> ConversionOptions {
        var options = ConversionOptions()
        options.legacyPolicy = .keep
        return options
    }

    @Test("every sample converts row for row, and its files are left byte-identical", arguments: sampleNames)
    func samplesConvert(name: String) async throws {
        try await withTemporaryDirectory { directory in
            let samples = try LegacySamples.makeAll(in: directory)
            let sample = try #require(samples.first { $0.name == name })
            let source = directory.appending(sample.source)
            let legacyStore = sample.kind == "uimanageddocument-package"
                ? source.appending("StoreContent/persistentStore") : source
            let expected = try Fixtures.digestsAsSQLiteReads(legacyStore)
            let before = try Fixtures.fileHashes(directory)

            let report = try LegacyConverter(options: keepOptions()).convert(storeAt: source)
            #expect(report.outcome == .converted)
            #expect(report.kind.rawValue == sample.kind)
            #expect(report.rowCounts == sample.rowCounts)
            let bundle = FilePath(report.bundle)
            #expect(try Fixtures.bundleDigests(bundle) == expected)
            // Nothing changed among the source files; only the bundle was added.
            var after = try Fixtures.fileHashes(directory)
            after.removeValue(forKey: bundle.lastComponent!.string)
            #expect(after == before)
            _ = try BundleReader(at: bundle).verify(full: true)
        }
    }

    @Test("rows that live only in the -wal are in the bundle")
    func walOnlyRows() async throws {
        try await withTemporaryDirectory { directory in
            let sample = try LegacySamples.makeTimeStore(in: directory)
            let source = directory.appending(sample.source)
            // The main file alone has only the checkpointed events.
            let mainOnly = directory.appending("main-only.sqlite")
            try FileManager.default.copyItem(atPath: source.string, toPath: mainOnly.string)
            #expect(try Fixtures.rowDigests(of: mainOnly)["ZEVENT"]?.hasPrefix("\(LegacySamples.checkpointedEventCount):") == true)
            let report = try LegacyConverter(options: keepOptions()).convert(storeAt: source)
            let total = LegacySamples.checkpointedEventCount + LegacySamples.walOnlyEventCount
            #expect(report.rowCounts["ZEVENT"] == total)
            let extracted = try BundleReader(at: FilePath(report.bundle)).extract(into: directory.appending("out"))
            let titles = try DatabaseQueue(path: extracted.store.string).read { db in
                try String.fetchAll(db, sql: "SELECT ZTITLE FROM ZEVENT ORDER BY Z_PK")
            }
            #expect(titles.last == "Session \(total)")
            #expect(try DatabaseQueue(path: extracted.store.string).read { db in
                try String.fetchAll(db, sql: "SELECT ZNAME FROM ZTAG WHERE ZNAME IN ('Music', 'Cooking')")
            }.count == 2)
        }
    }

    @Test("a store that needs no recovery is packed in place: the bundle's store is the source's bytes", arguments: [
        1_000, 20_000,  // checked before packing, and beside the writer (4 MiB and more)
    ])
    func inPlace(rows: Int) async throws {
        try await withTemporaryDirectory { directory in
            let source = try Fixtures.makeStore(at: directory.appending("Plain.sqlite"), rows: rows)
            let sourceBytes = try Fixtures.bytes(of: source)
            let before = try Fixtures.fileHashes(directory)
            #expect(StoreInspector.immutableURI(source) != nil, "this SQLite reads URIs, so the store is read in place")
            let report = try LegacyConverter(options: keepOptions()).convert(storeAt: source)
            let reader = try BundleReader(at: FilePath(report.bundle))
            let extracted = try reader.extract(into: directory.appending("out"))
            #expect(try Fixtures.bytes(of: extracted.store) == sourceBytes, "byte for byte")
            let provenance = try #require(reader.metadata.provenance)
            #expect(provenance.mainFileSHA256 == ZipSurgery.sha256(sourceBytes), "the bytes packed are the source's")
            #expect(reader.metadata.store.digest == Fixtures.storeDigest(of: sourceBytes,
                                                                        interval: reader.metadata.store.segments?.interval))
            #expect(provenance.files.map(\.name) == ["Plain.sqlite"])
            #expect(report.rowCounts["note"] == rows)
            var after = try Fixtures.fileHashes(directory)
            after = after.filter { !$0.key.hasPrefix("Plain.mdz") && !$0.key.hasPrefix("out/") }
            #expect(after == before, "the source is as it was, and no temporary is left")
            _ = try reader.verify(full: true)
        }
    }

    @Test("a writer mid-transaction in another process: the committed state is packed in place, then it commits")
    func inPlaceBesideAWriter() async throws {
        try await withTemporaryDirectory { directory in
            let path = try Fixtures.makeStore(at: directory.appending("Live.sqlite"), rows: 200)
            let committed = try Fixtures.digestsAsSQLiteReads(path)
            // > RESERVED: the writer has begun and written its journal, and needs our SHARED lock gone to commit.
            let script = """
                import sqlite3, sys, time
                db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
                db.execute("BEGIN IMMEDIATE")
                db.execute("INSERT INTO note(title) VALUES ('in flight')")
                print("reserved", flush=True)
                sys.stdin.readline()
                db.execute("COMMIT")
                print(db.execute("SELECT count(*) FROM note").fetchone()[0], flush=True)
                """
            let python = try PythonProcess(script, [path.string])
            defer { python.kill() }
            #expect(python.readLine() == "reserved")

            let report = try LegacyConverter(options: keepOptions()).convert(storeAt: path)
            #expect(try Fixtures.bundleDigests(FilePath(report.bundle)) == committed, "the committed rows, no more")
            python.send("go")
            #expect(python.readLine() == "201", "the writer committed after the conversion")
        }
    }

    @Test("a -wal beside a store whose header says rollback journal is replayed, as SQLite would")
    func walBesideRollbackHeader() async throws {
        try await withTemporaryDirectory { directory in
            let sample = try LegacySamples.makeTimeStore(in: directory)
            let source = directory.appending(sample.source)
            // The header says rollback journal; SQLite still replays the -wal it finds.
            var bytes = try Fixtures.bytes(of: source)
            #expect(bytes[18] == 2 && bytes[19] == 2)
            bytes[18] = 1
            bytes[19] = 1
            try Fixtures.write(bytes, to: source)
            let expected = try Fixtures.digestsAsSQLiteReads(source)
            let total = LegacySamples.checkpointedEventCount + LegacySamples.walOnlyEventCount
            #expect(expected["ZEVENT"]?.hasPrefix("\(total):") == true, "SQLite reads the -wal's rows")
            let report = try LegacyConverter(options: keepOptions()).convert(storeAt: source)
            #expect(report.rowCounts["ZEVENT"] == total)
            #expect(try Fixtures.bundleDigests(FilePath(report.bundle)) == expected)
        }
    }

    @Test("a hot journal's uncommitted changes are rolled back, never packed")
    func hotJournal() async throws {
        try await withTemporaryDirectory { directory in
            let sample = try LegacySamples.makeLedgerWithHotJournal(in: directory)
            let source = directory.appending(sample.source)
            #expect(FileManager.default.fileExists(atPath: source.string + "-journal"))
            let report = try LegacyConverter(options: keepOptions()).convert(storeAt: source)
            let extracted = try BundleReader(at: FilePath(report.bundle)).extract(into: directory.appending("out"))
            let (count, uncommitted, version) = try DatabaseQueue(path: extracted.store.string).read { db in
                (try Int.fetchOne(db, sql: "SELECT count(*) FROM entry") ?? -1,
                 try Int.fetchOne(db, sql: "SELECT count(*) FROM entry WHERE amount = ?",
                                  arguments: [LegacySamples.ledgerUncommittedAmount]) ?? -1,
                 try Int.fetchOne(db, sql: "PRAGMA user_version") ?? -1)
            }
            #expect(count == LegacySamples.ledgerCommittedRows)
            #expect(uncommitted == 0)
            #expect(version == 3, "user_version is data and survives")
            // The journal is still beside the source, untouched.
            #expect(FileManager.default.fileExists(atPath: source.string + "-journal"))
        }
    }

    @Test("external data is packed byte for byte and Core Data provenance is recorded")
    func externalDataAndProvenance() async throws {
        try await withTemporaryDirectory { directory in
            let sample = try LegacySamples.makeDiaryStore(in: directory)
            let report = try LegacyConverter(options: keepOptions()).convert(storeAt: directory.appending(sample.source))
            let reader = try BundleReader(at: FilePath(report.bundle))
            let photos = reader.metadata.entries.filter { $0.name.hasPrefix(BundleLayout.externalDataPrefix) }
            #expect(photos.count == LegacySamples.diaryDays.filter(\.photo).count)
            for (index, day) in LegacySamples.diaryDays.enumerated() where day.photo {
                let name = BundleLayout.externalDataPrefix + LegacySamples.photoUUID(dayIndex: index)
                let entry = try #require(photos.first { $0.name == name })
                let bytes = LegacySamples.photoBytes(dayIndex: index)
                #expect(entry.size == Int64(bytes.count))
                #expect(entry.sha256 == SHA256Hex.of(bytes))
            }
            let provenance = try #require(reader.metadata.provenance)
            #expect(provenance.kind == "coredata-sqlite")
            #expect(provenance.fileName == "Diary.sqlite")
            #expect(provenance.files.map(\.name).contains(".Diary_SUPPORT/_EXTERNAL_DATA/\(LegacySamples.photoUUID(dayIndex: 1))"))
            let coreData = try #require(provenance.coreData)
            #expect(coreData.storeUUID == LegacySamples.diaryLayout.storeUUID)
            #expect(coreData.storeType == "SQLite")
            #expect(coreData.modelVersionIdentifiers == ["Diary 1"])
            #expect(Set(coreData.modelVersionHashes.keys) == ["QuestionList", "DayRecord"])
            #expect(coreData.frameworkVersion == "1251")
            #expect(coreData.metadataVersion == 1)
            // And the bundle extracts back into the layout Core Data expects.
            let placed = try reader.extractStore(to: directory.appending("restored/Diary.sqlite"))
            #expect(placed.externalData != nil)
        }
    }

    @Test("a UIManagedDocument package carries its metadata plist and additional content")
    func package() async throws {
        try await withTemporaryDirectory { directory in
            let sample = try LegacySamples.makeRecipesPackage(in: directory)
            let report = try LegacyConverter(options: keepOptions()).convert(storeAt: directory.appending(sample.source))
            #expect(report.bundle == directory.appending("Recipes.mdz").string)
            let reader = try BundleReader(at: FilePath(report.bundle))
            let names = reader.metadata.entries.map(\.name)
            #expect(names == ["AdditionalContent/DocumentMetadata.plist", "AdditionalContent/cover.txt"])
            let provenance = try #require(reader.metadata.provenance)
            #expect(provenance.kind == "uimanageddocument-package")
            #expect(provenance.packageMetadata?["NSPersistentStoreUbiquitousContentNameKey"] == .string("Recipes"))
            #expect(provenance.coreData?.storeUUID == LegacySamples.recipesLayout.storeUUID)
        }
    }

    @Test("policies: backup moves the group into a folder the report names; delete removes it; both only after the bundle")
    func policies() async throws {
        try await withTemporaryDirectory { directory in
            try LegacySamples.makeTimeStore(in: directory)
            try LegacySamples.makeDiaryStore(in: directory)
            var options = ConversionOptions()
            options.legacyPolicy = .backup
            let backup = try LegacyConverter(options: options).convert(storeAt: directory.appending("minimalTime.sqlite"))
            let location = try #require(backup.backupLocation.map { FilePath($0) })
            #expect(try FileSystem.contentsOfDirectory(location) == ["minimalTime.sqlite", "minimalTime.sqlite-shm", "minimalTime.sqlite-wal"])
            #expect(try Fixtures.digestsAsSQLiteReads(location.appending("minimalTime.sqlite"))
                    == Fixtures.bundleDigests(FilePath(backup.bundle)))

            options.legacyPolicy = .delete
            let deleted = try LegacyConverter(options: options).convert(storeAt: directory.appending("Diary.sqlite"))
            #expect(deleted.disposedFiles.count == 2)
            let left = try FileSystem.contentsOfDirectory(directory)
            #expect(!left.contains("Diary.sqlite") && !left.contains(".Diary_SUPPORT"))
            #expect(left.contains("Diary.mdz") && left.contains("minimalTime.mdz"))
        }
    }

    @Test("converting again recognises the finished bundle, and a run that stopped mid-disposal is completed")
    func idempotent() async throws {
        try await withTemporaryDirectory { directory in
            try LegacySamples.makeTimeStore(in: directory)
            let source = directory.appending("minimalTime.sqlite")
            let converter = LegacyConverter(options: keepOptions())
            let first = try converter.convert(storeAt: source)
            let bundleBytes = try Fixtures.bytes(of: FilePath(first.bundle))
            let second = try converter.convert(storeAt: source)
            #expect(second.outcome == .alreadyConverted)
            #expect(try Fixtures.bytes(of: FilePath(first.bundle)) == bundleBytes)

            // A crash after the main file was deleted, before its sidecars were: the rerun finishes the job.
            try FileSystem.removeFile(source)
            var options = ConversionOptions()
            options.legacyPolicy = .delete
            let third = try LegacyConverter(options: options).convert(storeAt: source)
            #expect(third.outcome == .alreadyConverted)
            #expect(try FileSystem.contentsOfDirectory(directory) == ["minimalTime.mdz"])
        }
    }

    @Test("a store changed since its conversion is not silently skipped")
    func changedSinceConversion() async throws {
        try await withTemporaryDirectory { directory in
            try LegacySamples.makeTasteStore(in: directory)
            let source = directory.appending("TasteB.sqlite")
            _ = try LegacyConverter(options: keepOptions()).convert(storeAt: source)
            let queue = try DatabaseQueue(path: source.string)
            try queue.write { db in try db.execute(sql: "UPDATE ZRESTAURANT SET ZRATING = 1") }
            try queue.close()
            let error = #expect(throws: DocumentError.self) {
                try LegacyConverter(options: keepOptions()).convert(storeAt: source)
            }
            #expect(error?.code == .alreadyExists)
        }
    }
}

enum SHA256Hex {
    static func of(_ data: Data) -> String {
        SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined()
    }
}
