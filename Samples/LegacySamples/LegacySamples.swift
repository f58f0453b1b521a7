import Foundation
import GRDB
import SystemPackage

/// Small legacy stores that look like the ones old app releases left behind, made deterministically.
///
/// `make-samples` writes them into `Samples/stores/`; the tests make fresh ones in temporary folders with the same
/// functions, so what the tests check is what the samples hold.
public enum LegacySamples {
    /// One sample: what to convert, and what SQLite reads from it.
    public struct Sample: Sendable {
        /// A short name.
        public var name: String
        /// The file or package to convert, relative to the samples folder.
        public var source: String
        /// What a converter should call it: `coredata-sqlite`, `sqlite` or `uimanageddocument-package`.
        public var kind: String
        /// Row counts per table as SQLite reads the store with its sidecars.
        public var rowCounts: [String: Int]
        /// What the sample demonstrates.
        public var summary: String
    }

    /// Writes every sample into `directory` (which must exist and not hold them yet).
    @discardableResult
    public static func makeAll(in directory: FilePath) throws -> [Sample] {
        [
            try makeTasteStore(in: directory),
            try makeTimeStore(in: directory),
            try makeDiaryStore(in: directory),
            try makeRecipesPackage(in: directory),
            try makeLedgerWithHotJournal(in: directory),
        ]
    }

    // MARK: TasteB: a Core Data store of a taste-tracking app

    public static let restaurants: [(name: String, city: String, rating: Int, dishes: [(String, Double)])] = [
        ("Chez Panisse", "Berkeley", 5, [("Garden salad", 14.5), ("Grilled trout", 32), ("Galette", 12)]),
        ("Zuni Café", "San Francisco", 4, [("Roast chicken", 58), ("Caesar salad", 16)]),
        ("Noma", "København", 5, [("Ant-covered shrimp", 45), ("Moss", 20), ("Hay ice cream", 18)]),
        ("Din Tai Fung", "Taipei", 4, [("Xiao long bao", 9.5), ("Fried rice", 8), ("Cucumber salad", 5)]),
        ("Pizzeria Bianco", "Phoenix", 4, [("Rosa", 19), ("Wiseguy", 19)]),
        ("Sukiyabashi Jiro", "東京", 5, [("Omakase", 300)]),
        ("Le Bernardin", "New York", 5, [("Tuna tartare", 38), ("Black bass", 52)]),
        ("Franklin Barbecue", "Austin", 4, [("Brisket", 32), ("Pulled pork", 22), ("Pie", 6)]),
        ("Septime", "Paris", 4, [("Tomates", 16), ("Pigeon", 38)]),
        ("Hawker stall 12", "Singapore", 3, [("Laksa", 6), ("Chicken rice", 5)]),
        ("Café Nula", "Lisboa", 3, []),
        ("Tartine", "San Francisco", 4, [("Morning bun", 5.5), ("Country loaf", 12), ("Croque monsieur", 14)]),
    ]

    public static let tasteLayout = CoreDataLayout(
        entities: [
            .init(name: "Restaurant", columns: ["ZNAME VARCHAR", "ZCITY VARCHAR", "ZRATING INTEGER", "ZVISITED TIMESTAMP"]),
            .init(name: "Dish", columns: ["ZRESTAURANT INTEGER", "ZNAME VARCHAR", "ZPRICE FLOAT", "ZNOTES VARCHAR"]),
        ],
        storeUUID: "3F2C8E52-7A1B-4E8E-9A55-0B6D3B2A9C01", modelVersionIdentifier: "TasteB 1")

    @discardableResult
    public static func makeTasteStore(in directory: FilePath) throws -> Sample {
        let path = directory.appending("TasteB.sqlite")
        let queue = try DatabaseQueue(path: path.string)
        try queue.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA journal_mode = DELETE")
            try db.inTransaction {
                try tasteLayout.createTables(db)
                for (index, restaurant) in restaurants.enumerated() {
                    let pk = try tasteLayout.insert(db, "Restaurant", [
                        "ZNAME": restaurant.name, "ZCITY": restaurant.city, "ZRATING": restaurant.rating,
                        "ZVISITED": coreDataTimestamp(year: 2015, month: 1 + index % 12, day: 3 + index),
                    ])
                    for (dishIndex, dish) in restaurant.dishes.enumerated() {
                        try tasteLayout.insert(db, "Dish", [
                            "ZRESTAURANT": pk, "ZNAME": dish.0, "ZPRICE": dish.1,
                            "ZNOTES": dishIndex == 0 ? "house favourite" : nil,
                        ])
                    }
                }
                return .commit
            }
        }
        try queue.close()
        let dishes = restaurants.reduce(0) { $0 + $1.dishes.count }
        return Sample(name: "TasteB", source: "TasteB.sqlite", kind: "coredata-sqlite",
                      rowCounts: ["ZRESTAURANT": restaurants.count, "ZDISH": dishes, "Z_PRIMARYKEY": 2,
                                  "Z_METADATA": 1, "Z_MODELCACHE": 1],
                      summary: "Core Data store of a taste-tracking app: restaurants and their dishes")
    }

    // MARK: minimalTime: a time-tracking store whose last transactions live only in its -wal

    public static let tagNames = ["Work", "Reading", "Exercise", "Errands"]
    public static let walOnlyTagNames = ["Music", "Cooking"]
    /// Events committed and checkpointed into the main file.
    public static let checkpointedEventCount = 30
    /// Events committed afterwards, present only in `minimalTime.sqlite-wal`.
    public static let walOnlyEventCount = 15

    public static let timeLayout = CoreDataLayout(
        entities: [
            .init(name: "Event", columns: ["ZTAG INTEGER", "ZTITLE VARCHAR", "ZSTART TIMESTAMP", "ZEND TIMESTAMP"]),
            .init(name: "Tag", columns: ["ZNAME VARCHAR", "ZCOLOR VARCHAR"]),
        ],
        storeUUID: "A4B7C2D1-0E9F-4C3B-8A76-5D4E3F2A1B0C", modelVersionIdentifier: "minimalTime 1")

    @discardableResult
    public static func makeTimeStore(in directory: FilePath) throws -> Sample {
        // Written in a private folder with automatic checkpoints off, then the three files are copied out while
        // the connection is still open: the copy's last transactions exist only in its -wal.
        let work = directory.appending(".minimalTime-work")
        try FileManager.default.createDirectory(atPath: work.string, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: work.string) }  // Squash cleanup error.
        let path = work.appending("minimalTime.sqlite")
        var configuration = Configuration()
        configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA wal_autocheckpoint = 0") }
        let queue = try DatabaseQueue(path: path.string, configuration: configuration)
        try queue.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA journal_mode = WAL")
            try db.inTransaction {
                try timeLayout.createTables(db)
                for (index, name) in tagNames.enumerated() {
                    try timeLayout.insert(db, "Tag", ["ZNAME": name, "ZCOLOR": ["red", "blue", "green", "grey"][index]])
                }
                for index in 0..<checkpointedEventCount {
                    try insertEvent(db, index: index, tagCount: tagNames.count)
                }
                return .commit
            }
            try db.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)")
            for (offset, name) in walOnlyTagNames.enumerated() {
                try timeLayout.insert(db, "Tag", ["ZNAME": name, "ZCOLOR": offset == 0 ? "purple" : "orange"])
            }
            for index in checkpointedEventCount..<(checkpointedEventCount + walOnlyEventCount) {
                try db.inTransaction {
                    try insertEvent(db, index: index, tagCount: tagNames.count + walOnlyTagNames.count)
                    return .commit
                }
            }
        }
        for suffix in ["", "-wal", "-shm"] {
            try FileManager.default.copyItem(atPath: path.string + suffix,
                                             toPath: directory.appending("minimalTime.sqlite" + suffix).string)
        }
        try queue.close()
        return Sample(name: "minimalTime", source: "minimalTime.sqlite", kind: "coredata-sqlite",
                      rowCounts: ["ZEVENT": checkpointedEventCount + walOnlyEventCount,
                                  "ZTAG": tagNames.count + walOnlyTagNames.count, "Z_PRIMARYKEY": 2,
                                  "Z_METADATA": 1, "Z_MODELCACHE": 1],
                      summary: "time-tracking store whose last \(walOnlyEventCount) events and \(walOnlyTagNames.count) tags live only in its -wal")
    }

    private static func insertEvent(_ db: Database, index: Int, tagCount: Int) throws {
        let start = coreDataTimestamp(year: 2016, month: 3, day: 1 + index % 28, hour: 8 + index % 9)
        try timeLayout.insert(db, "Event", [
            "ZTAG": index % 5 == 4 ? nil : Int64(1 + index % tagCount), "ZTITLE": "Session \(index + 1)",
            "ZSTART": start, "ZEND": start + Double(1_800 + 60 * index),
        ])
    }

    // MARK: Diary: questions and answers, photos as Core Data external data

    public static let diaryQuestions = ["How did you sleep?", "What made you smile?", "What did you learn?",
                                        "Who did you talk to?"]
    /// Each day: its date as the old app stored it (a string), the questions asked that day, the answers
    /// (`nil` where the day was left blank), and whether a photo was attached (stored externally).
    public static let diaryDays: [(date: String, questions: [String], answers: [String?], photo: Bool)] = [
        ("2017-12-28", Array(diaryQuestions[0..<3]), ["Badly", "Snow", nil], false),
        ("2017-12-29", Array(diaryQuestions[0..<3]), ["Well", "A letter", "Knots"], true),
        ("2017-12-30", diaryQuestions, ["Well", nil, "Bread", "Ada"], true),
        ("2017-12-31", diaryQuestions, [nil, nil, nil, nil], false),
        ("2018-01-01", diaryQuestions, ["Late", "Fireworks", "Patience", "Grace"], true),
        ("2018-03-25", Array(diaryQuestions[1..<4]), ["Sun", "Tides", "Lin"], false),
        ("2018-10-28", diaryQuestions, ["Long", "The clock change", "Sourdough", nil], false),
    ]

    public static let diaryLayout = CoreDataLayout(
        entities: [
            .init(name: "QuestionList", columns: ["ZQUESTIONS BLOB"]),
            .init(name: "DayRecord", columns: ["ZDATE VARCHAR", "ZQUESTIONS BLOB", "ZANSWERS BLOB", "ZPHOTO BLOB"]),
        ],
        storeUUID: "5E6F7A8B-9C0D-4E1F-A2B3-C4D5E6F7A8B9", modelVersionIdentifier: "Diary 1")

    /// The marker an archived array holds where a day was left blank (the keyed archiver's own null marker).
    public static let nullMarker = "$null"

    /// An archived array as the old app stored it: a binary property list of strings, ``nullMarker`` for blanks.
    ///
    /// (Foundation's `NSKeyedArchiver` on Linux crashes on repeated use, so the keyed-archive envelope is left out.)
    public static func archive(_ strings: [String?]) throws -> Data {
        try PropertyListSerialization.data(fromPropertyList: strings.map { $0 ?? nullMarker }, format: .binary,
                                           options: 0)
    }

    /// Reads an archived array back, `nil` for blanks.
    public static func unarchive(_ data: Data) throws -> [String?] {
        guard let strings = try PropertyListSerialization.propertyList(from: data, format: nil) as? [String] else {
            throw CocoaError(.propertyListReadCorrupt)
        }
        return strings.map { $0 == nullMarker ? nil : $0 }
    }

    /// The external-data file name of a day's photo.
    public static func photoUUID(dayIndex: Int) -> String {
        String(format: "8C1D2E3F-4A5B-4C6D-8E7F-%012d", dayIndex + 1)
    }

    public static func photoBytes(dayIndex: Int) -> Data {
        var bytes: [UInt8] = [0xFF, 0xD8, 0xFF, 0xE0]  // a JPEG's first bytes
        var state = UInt64(dayIndex + 1) &* 0x9E37_79B9_7F4A_7C15
        for _ in 0..<(6_000 + 1_000 * dayIndex) {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            bytes.append(UInt8(truncatingIfNeeded: state >> 33))
        }
        return Data(bytes)
    }

    @discardableResult
    public static func makeDiaryStore(in directory: FilePath) throws -> Sample {
        let path = directory.appending("Diary.sqlite")
        let external = directory.appending(".Diary_SUPPORT/_EXTERNAL_DATA")
        try FileManager.default.createDirectory(atPath: external.string, withIntermediateDirectories: true)
        let queue = try DatabaseQueue(path: path.string)
        try queue.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA journal_mode = DELETE")
            try db.inTransaction {
                try diaryLayout.createTables(db)
                try diaryLayout.insert(db, "QuestionList", ["ZQUESTIONS": try archive(diaryQuestions)])
                for (index, day) in diaryDays.enumerated() {
                    var photo: Data?
                    if day.photo {
                        // Core Data's external reference: 0x02, the file's UUID, NUL.
                        let uuid = photoUUID(dayIndex: index)
                        photo = Data([0x02] + Array(uuid.utf8) + [0])
                        try photoBytes(dayIndex: index).write(to: URL(fileURLWithPath: external.appending(uuid).string))
                    }
                    try diaryLayout.insert(db, "DayRecord", [
                        "ZDATE": day.date, "ZQUESTIONS": try archive(day.questions), "ZANSWERS": try archive(day.answers),
                        "ZPHOTO": photo,
                    ])
                }
                return .commit
            }
        }
        try queue.close()
        return Sample(name: "Diary", source: "Diary.sqlite", kind: "coredata-sqlite",
                      rowCounts: ["ZQUESTIONLIST": 1, "ZDAYRECORD": diaryDays.count, "Z_PRIMARYKEY": 2,
                                  "Z_METADATA": 1, "Z_MODELCACHE": 1],
                      summary: "question-and-answer diary with archived arrays and \(diaryDays.filter(\.photo).count) photos in _EXTERNAL_DATA")
    }

    // MARK: Recipes: a UIManagedDocument package

    public static let recipes: [(name: String, minutes: Int, ingredients: [String])] = [
        ("Pancakes", 20, ["Flour", "Milk", "Eggs", "Butter"]),
        ("Shakshuka", 30, ["Eggs", "Tomatoes", "Peppers", "Cumin"]),
        ("Dal", 45, ["Lentils", "Onion", "Turmeric"]),
        ("Focaccia", 180, ["Flour", "Water", "Yeast", "Olive oil", "Salt"]),
    ]

    public static let recipesLayout = CoreDataLayout(
        entities: [
            .init(name: "Recipe", columns: ["ZNAME VARCHAR", "ZMINUTES INTEGER"]),
            .init(name: "Ingredient", columns: ["ZRECIPE INTEGER", "ZNAME VARCHAR"]),
        ],
        storeUUID: "C3D4E5F6-A7B8-4C9D-8E0F-1A2B3C4D5E6F", modelVersionIdentifier: "Recipes 2")

    @discardableResult
    public static func makeRecipesPackage(in directory: FilePath) throws -> Sample {
        let package = directory.appending("Recipes.recipedoc")
        let storeContent = package.appending("StoreContent")
        try FileManager.default.createDirectory(atPath: storeContent.string, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: package.appending("AdditionalContent").string,
                                                withIntermediateDirectories: true)
        let queue = try DatabaseQueue(path: storeContent.appending("persistentStore").string)
        try queue.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA journal_mode = DELETE")
            try db.inTransaction {
                try recipesLayout.createTables(db)
                for recipe in recipes {
                    let pk = try recipesLayout.insert(db, "Recipe", ["ZNAME": recipe.name, "ZMINUTES": recipe.minutes])
                    for ingredient in recipe.ingredients {
                        try recipesLayout.insert(db, "Ingredient", ["ZRECIPE": pk, "ZNAME": ingredient])
                    }
                }
                return .commit
            }
        }
        try queue.close()
        let plist: [String: Any] = [
            "NSPersistentStoreUbiquitousContentNameKey": "Recipes",
            "NSPersistentStoreOptions": ["NSMigratePersistentStoresAutomaticallyOption": true],
        ]
        try PropertyListSerialization.data(fromPropertyList: plist, format: .xml, options: 0)
            .write(to: URL(fileURLWithPath: package.appending("DocumentMetadata.plist").string))
        try Data("A family cookbook.\n".utf8)
            .write(to: URL(fileURLWithPath: package.appending("AdditionalContent/cover.txt").string))
        return Sample(name: "Recipes", source: "Recipes.recipedoc", kind: "uimanageddocument-package",
                      rowCounts: ["ZRECIPE": recipes.count, "ZINGREDIENT": recipes.reduce(0) { $0 + $1.ingredients.count },
                                  "Z_PRIMARYKEY": 2, "Z_METADATA": 1, "Z_MODELCACHE": 1],
                      summary: "UIManagedDocument package with DocumentMetadata.plist and additional content")
    }

    // MARK: Ledger: a plain SQLite store with a hot journal

    public static let ledgerCommittedRows = 100
    /// The uncommitted transaction changed every amount to this and added this many rows; a reader must see neither.
    public static let ledgerUncommittedAmount = -1.0
    public static let ledgerUncommittedRows = 400

    @discardableResult
    public static func makeLedgerWithHotJournal(in directory: FilePath) throws -> Sample {
        // A writer with a tiny cache spills a large transaction into the main file before committing; copying the
        // main file and its journal at that moment is exactly what a crash mid-transaction leaves behind.
        let work = directory.appending(".ledger-work")
        try FileManager.default.createDirectory(atPath: work.string, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: work.string) }  // Squash cleanup error.
        let path = work.appending("Ledger.sqlite")
        let queue = try DatabaseQueue(path: path.string)
        try queue.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA journal_mode = DELETE")
            try db.execute(sql: "PRAGMA user_version = 3")
            try db.execute(sql: "CREATE TABLE entry(id INTEGER PRIMARY KEY, amount REAL NOT NULL, memo TEXT)")
            try db.inTransaction {
                for index in 0..<ledgerCommittedRows {
                    try db.execute(sql: "INSERT INTO entry(amount, memo) VALUES (?, ?)",
                                   arguments: [Double(index) * 1.25, "entry \(index)"])
                }
                return .commit
            }
            try db.execute(sql: "PRAGMA cache_size = 2")
            try db.execute(sql: "BEGIN")
            try db.execute(sql: "UPDATE entry SET amount = ?", arguments: [ledgerUncommittedAmount])
            for index in 0..<ledgerUncommittedRows {
                try db.execute(sql: "INSERT INTO entry(amount, memo) VALUES (?, ?)",
                               arguments: [ledgerUncommittedAmount, String(repeating: "uncommitted \(index) ", count: 20)])
            }
            for suffix in ["", "-journal"] {
                try FileManager.default.copyItem(atPath: path.string + suffix,
                                                 toPath: directory.appending("Ledger.sqlite" + suffix).string)
            }
            try db.execute(sql: "ROLLBACK")
        }
        try queue.close()
        return Sample(name: "Ledger", source: "Ledger.sqlite", kind: "sqlite",
                      rowCounts: ["entry": ledgerCommittedRows],
                      summary: "plain SQLite store left with a hot -journal by a crash mid-transaction")
    }
}
