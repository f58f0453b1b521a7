import Crypto
import Foundation
import GRDB
import LegacySamples
import SampleApps
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

/// The three sample apps, end to end on the legacy stores the samples generator makes: converted, migrated, every
/// old row present in the new shape (checked against the generator's own data), and run-once work run once.
@Suite("Sample apps: lightweight, custom and compatibility-level migrations on real legacy stores")
struct SampleAppTests {
    /// Reads a saved document read-only (the bundle is not changed).
    private func read<T: Sendable>(_ bundle: FilePath, working: FilePath,
                                   _ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        var options = Document.OpenOptions()
        options.isReadOnly = true
        options.workingDirectory = working
        let document = try await Document.open(at: bundle, options: options)
        defer { Task { try? await document.close() } }  // Squash close error of a read-only snapshot.
        return try await document.reader.read(body)
    }

    @Test("taste app: categories added without SQL, every restaurant filed under \"Restaurants\" exactly once across three launches")
    func tasteApp() async throws {
        try await withTemporaryDirectory { directory in
            let working = directory.appending("working")
            try LegacySamples.makeTasteStore(in: directory)

            let first = try await SampleLaunch<TasteApp>.launch(in: directory, workingDirectory: working)
            #expect(first.conversion?.outcome == .converted)
            #expect(first.appliedMigrations == ["TasteB-2-categories", "TasteB-restaurants-category"])
            #expect(first.summary == TasteApp.Summary(restaurants: 12, dishes: 26, categories: ["Restaurants": 12],
                                                      uncategorised: 0))
            #expect(!FileSystem.isRegularFile(directory.appending("TasteB.sqlite")), "backed up by default")
            #expect(FileSystem.isDirectory(directory.appending("docconvert-backup")))

            // > Second launch adds a restaurant with no category; third launch changes nothing.
            let second = try await SampleLaunch<TasteApp>.launch(in: directory, workingDirectory: working) { db in
                try TasteApp.addRestaurant("Lucky Peach", city: "New York", category: nil, db)
            }
            let third = try await SampleLaunch<TasteApp>.launch(in: directory, workingDirectory: working)
            for launch in [second, third] {
                #expect(launch.conversion == nil)
                #expect(launch.appliedMigrations.isEmpty, "the fix-up must not run again")
                #expect(launch.summary == TasteApp.Summary(restaurants: 13, dishes: 26, categories: ["Restaurants": 12],
                                                           uncategorised: 1))
            }
            #expect(third.metadata.model.compatibilityLevel == 1)
            #expect(third.metadata.model.version == "2")
            #expect(third.metadata.model.migrations.map(\.identifier) == ["TasteB-2-categories", "TasteB-restaurants-category"])

            // > Every old row in the new shape, against the generator's data.
            let bundle = directory.appending("TasteB.mdz")
            struct Restaurant: Sendable {
                var name: String, city: String, rating: Int, category: String?, dishes: String?
            }
            let rows = try await read(bundle, working: working) { db in
                try Row.fetchAll(db, sql: """
                    SELECT r.ZNAME, r.ZCITY, r.ZRATING, c.ZNAME AS category,
                           (SELECT group_concat(d.ZNAME || '=' || d.ZPRICE || '/' || d.ZFAVOURITE, ';')
                            FROM (SELECT * FROM ZDISH WHERE ZRESTAURANT = r.Z_PK ORDER BY Z_PK) d) AS dishes
                    FROM ZRESTAURANT r LEFT JOIN ZCATEGORY c ON c.Z_PK = r.ZCATEGORY ORDER BY r.Z_PK
                    """).map {
                    Restaurant(name: $0["ZNAME"], city: $0["ZCITY"], rating: $0["ZRATING"] ?? 0, category: $0["category"],
                               dishes: $0["dishes"])
                }
            }
            #expect(rows.count == LegacySamples.restaurants.count + 1)
            for (row, restaurant) in zip(rows, LegacySamples.restaurants) {
                #expect(row.name == restaurant.name)
                #expect(row.city == restaurant.city)
                #expect(row.rating == restaurant.rating)
                #expect(row.category == "Restaurants")
                let dishes = restaurant.dishes.map { "\($0.0)=\($0.1)/0" }.joined(separator: ";")
                #expect((row.dishes ?? "") == dishes, "\(restaurant.name)")
            }
            #expect(rows.last?.category == nil)
            let categories = try await read(bundle, working: working) { db in
                try String.fetchAll(db, sql: "SELECT ZNAME FROM ZCATEGORY")
            }
            #expect(categories.count == 1, "one Restaurants category, however many launches")
            let keys = try await read(bundle, working: working) { db in
                try Row.fetchAll(db, sql: "SELECT Z_NAME, Z_MAX FROM Z_PRIMARYKEY ORDER BY Z_ENT").map { "\($0[0] as String)=\($0[1] as Int)" }
            }
            #expect(keys == ["Restaurant=13", "Dish=26", "Category=1"], "Core Data's key bookkeeping stays right")
        }
    }

    /// The diary's days as the generator wrote them, in the new shape's terms.
    private var expectedDiaryDays: [DiaryApp.Day] {
        LegacySamples.diaryDays.map {
            DiaryApp.Day(day: $0.date, questions: $0.questions, answers: $0.answers, hasPhoto: $0.photo)
        }
    }

    @Test("diary app: archived arrays and date strings become templates, days, sections and questions; photos intact")
    func diaryApp() async throws {
        try await withTemporaryDirectory { directory in
            let working = directory.appending("working")
            try LegacySamples.makeDiaryStore(in: directory)

            let first = try await SampleLaunch<DiaryApp>.launch(in: directory, legacy: .keep, workingDirectory: working)
            #expect(first.conversion?.outcome == .converted)
            #expect(first.appliedMigrations == ["Diary-2-templates-and-sections"])
            #expect(first.summary.templates == [DiaryApp.templateName: LegacySamples.diaryQuestions])
            #expect(first.summary.days == expectedDiaryDays)
            for _ in 0..<2 {
                let again = try await SampleLaunch<DiaryApp>.launch(in: directory, legacy: .keep, workingDirectory: working)
                #expect(again.appliedMigrations.isEmpty)
                #expect(again.summary == first.summary)
            }

            let bundle = directory.appending("Diary.mdz")
            struct DayRow: Sendable {
                var key: Int, day: String, date: Double, photo: Data?
            }
            struct Shape: Sendable {
                var tables: [String], days: [DayRow], questions: Int, linked: Int
            }
            let shape = try await read(bundle, working: working) { db in
                Shape(tables: try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'Z%' ORDER BY name"),
                      days: try Row.fetchAll(db, sql: "SELECT Z_PK, ZDAY, ZDATE, ZPHOTO FROM ZDAYRECORD ORDER BY Z_PK").map {
                          DayRow(key: $0[0], day: $0[1], date: $0[2], photo: $0[3])
                      },
                      questions: try Int.fetchOne(db, sql: "SELECT count(*) FROM ZQUESTION") ?? 0,
                      linked: try Int.fetchOne(db, sql: "SELECT count(*) FROM ZQUESTION WHERE ZTEMPLATEQUESTION IS NOT NULL") ?? 0)
            }
            #expect(shape.tables == ["ZDAYRECORD", "ZQUESTION", "ZSECTIONRECORD", "ZTEMPLATE", "ZTEMPLATEQUESTION",
                                     "Z_METADATA", "Z_MODELCACHE", "Z_PRIMARYKEY"], "ZQUESTIONLIST is gone")
            #expect(shape.questions == LegacySamples.diaryDays.reduce(0) { $0 + $1.questions.count })
            #expect(shape.linked == shape.questions, "every question is linked to its template question")
            for (index, (row, day)) in zip(shape.days, LegacySamples.diaryDays).enumerated() {
                #expect(row.key == index + 1, "day records keep their keys")
                #expect(row.day == day.date)
                // > The floating date is that day's midnight UTC, as Core Data counts seconds.
                let parts = day.date.split(separator: "-").map { Int($0)! }
                #expect(row.date == coreDataTimestamp(year: parts[0], month: parts[1], day: parts[2], hour: 0))
                if day.photo {
                    #expect(row.photo == Data([0x02] + Array(LegacySamples.photoUUID(dayIndex: index).utf8) + [0]),
                            "Core Data's external reference is kept byte for byte")
                } else {
                    #expect(row.photo == nil)
                }
            }
            // > The photos themselves are in the bundle, byte for byte.
            let entries = try BundleReader(at: bundle).metadata.entries
            for (index, day) in LegacySamples.diaryDays.enumerated() where day.photo {
                let name = LegacySamples.photoUUID(dayIndex: index)
                let entry = try #require(entries.first { $0.name.hasSuffix(name) })
                #expect(entry.size == Int64(LegacySamples.photoBytes(dayIndex: index).count))
                #expect(entry.sha256 == SHA256.hash(data: LegacySamples.photoBytes(dayIndex: index)).hexString)
            }
        }
    }

    @Test("diary app: the same calendar days whatever the process's time zone (the executable under three TZs)")
    func diaryTimeZones() async throws {
        try await withTemporaryDirectory { directory in
            var outputs: [String] = []
            for zone in ["UTC", "Pacific/Kiritimati", "Pacific/Pago_Pago", "America/St_Johns"] {
                let folder = directory.appending(zone.replacingOccurrences(of: "/", with: "-"))
                try FileManager.default.createDirectory(atPath: folder.string, withIntermediateDirectories: true)
                try LegacySamples.makeDiaryStore(in: folder)
                let result = try SampleExecutable.run("diary-app", ["--folder", folder.string, "--legacy", "keep"],
                                                      environment: ["TZ": zone])
                #expect(result.status == 0, "\(zone): \(result.stderr)")
                let summary = result.stdout.drop { $0 != "{" }
                let decoded = try JSONDecoder().decode(DiaryApp.Summary.self, from: Data(summary.utf8))
                #expect(decoded.days == expectedDiaryDays, "\(zone)")
                outputs.append(String(summary))
            }
            #expect(Set(outputs).count == 1)
        }
    }

    @Test("diary app: a record the migration cannot map stops it, names the record, and leaves the bundle as it was")
    func diaryBadRecord() async throws {
        try await withTemporaryDirectory { directory in
            let working = directory.appending("working")
            try LegacySamples.makeDiaryStore(in: directory)
            let queue = try DatabaseQueue(path: directory.appending("Diary.sqlite").string)
            try await queue.write { db in
                try db.execute(sql: "UPDATE ZDAYRECORD SET ZDATE = '2018-02-30' WHERE Z_PK = 3")
            }
            try queue.close()
            let error = await #expect(throws: DocumentError.self) {
                _ = try await SampleLaunch<DiaryApp>.launch(in: directory, legacy: .keep, workingDirectory: working)
            }
            #expect(error?.code == .migrationFailed)
            #expect("\(error.map { "\($0)" } ?? "")".contains("DayRecord 3: the date"), "\(String(describing: error))")
            // > The conversion itself is done and kept; the migration is not, and the document says so.
            let bundle = directory.appending("Diary.mdz")
            let before = try Fixtures.bytes(of: bundle)
            #expect(try Document.metadata(at: bundle).model.migrations.isEmpty)
            _ = try? await SampleLaunch<DiaryApp>.launch(in: directory, legacy: .keep, workingDirectory: working)
            #expect(try Fixtures.bytes(of: bundle) == before)
            #expect(try FileSystem.contentsOfDirectory(working).allSatisfy { $0.hasPrefix(".") }, "no working copy left")
        }
    }

    @Test("time app: level 1 gives every event and tag (the -wal's too) a GUID once; GUIDs are unique and stable")
    func timeApp() async throws {
        try await withTemporaryDirectory { directory in
            let working = directory.appending("working")
            try LegacySamples.makeTimeStore(in: directory)
            let first = try await SampleLaunch<TimeApp>.launch(in: directory, workingDirectory: working)
            #expect(first.appliedMigrations == ["minimalTime-guid-columns", "minimalTime-level-1-guids"])
            let events = LegacySamples.checkpointedEventCount + LegacySamples.walOnlyEventCount
            let tags = LegacySamples.tagNames.count + LegacySamples.walOnlyTagNames.count
            #expect(first.summary.events == events)
            #expect(first.summary.tags == tags)
            #expect(first.summary.withoutGUID == 0)
            #expect(first.metadata.model.compatibilityLevel == 1)

            let bundle = directory.appending("minimalTime.mdz")
            let guids: @Sendable (Database) throws -> [String: String] = { db in
                var result: [String: String] = [:]
                for table in ["ZEVENT", "ZTAG"] {
                    for row in try Row.fetchAll(db, sql: "SELECT Z_PK, ZGUID FROM \(table)") {
                        result["\(table)/\(row[0] as Int64)"] = row[1]
                    }
                }
                return result
            }
            let before = try await read(bundle, working: working, guids)
            #expect(before.count == events + tags)
            #expect(Set(before.values).count == before.count, "unique")
            #expect(before.values.allSatisfy { UUID(uuidString: $0) != nil })

            let second = try await SampleLaunch<TimeApp>.launch(in: directory, workingDirectory: working) { db in
                try TimeApp.addEvent("Reading", start: Date(timeIntervalSince1970: 1_700_000_000),
                                     end: Date(timeIntervalSince1970: 1_700_001_800), db)
            }
            let third = try await SampleLaunch<TimeApp>.launch(in: directory, workingDirectory: working)
            #expect(second.appliedMigrations.isEmpty && third.appliedMigrations.isEmpty)
            #expect(third.summary.events == events + 1)
            #expect(third.summary.withoutGUID == 0)
            let after = try await read(bundle, working: working, guids)
            #expect(after.filter { before[$0.key] != nil } == before, "the fix-up did not run again: GUIDs are stable")
            #expect(Set(after.values).count == after.count)

            // > Every old row is there with its content (titles, times, tags), against the generator.
            let titles = try await read(bundle, working: working) { db in
                try String.fetchAll(db, sql: "SELECT ZTITLE FROM ZEVENT ORDER BY Z_PK")
            }
            #expect(Array(titles.prefix(events)) == (1...events).map { "Session \($0)" })
            let tagNames = try await read(bundle, working: working) { db in
                try String.fetchAll(db, sql: "SELECT ZNAME FROM ZTAG ORDER BY Z_PK")
            }
            #expect(tagNames == LegacySamples.tagNames + LegacySamples.walOnlyTagNames)
        }
    }
}

/// Runs a sample executable built beside the test bundle.
enum SampleExecutable {
    static func run(_ name: String, _ arguments: [String], environment: [String: String] = [:])
        throws -> (status: Int32, stdout: String, stderr: String) {
        try execute(builtProduct(name), arguments,
                    environment: ProcessInfo.processInfo.environment.merging(environment) { $1 })
    }
}
