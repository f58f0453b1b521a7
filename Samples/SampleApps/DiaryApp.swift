import Foundation
import GRDB
import ManagedDocument
import SystemPackage

/// The question-and-answer diary's model, and the custom (data-transforming) migration from version 1 to 2.
///
/// Version 1 (the legacy `Diary.sqlite`) kept the list of questions as one archived array in a blob
/// (`ZQUESTIONLIST.ZQUESTIONS`), and each day as a `DayRecord` with its date as a *string* (`2017-12-30`) and two
/// parallel archived arrays, `ZQUESTIONS` and `ZANSWERS` (a null placeholder where a question was left blank), plus a
/// photo held by Core Data as external data.
///
/// Version 2 has rows where version 1 had blobs (relationships are plain integer columns with indexes, as Core Data
/// keeps them):
/// - `Template` (`ZTEMPLATE`) with its `TemplateQuestion`s (`ZTEMPLATEQUESTION`: position, text);
/// - `DayRecord` (`ZDAYRECORD`, same `Z_PK`s and photos) with `ZDAY`, the calendar day as written (`2017-12-30`),
///   and `ZDATE`, that day's midnight in UTC as a Core Data timestamp: a *floating* date that the app shows with a UTC
///   calendar, so a record stays on its calendar day in every time zone. The migration never uses the process's
///   time zone;
/// - `SectionRecord` (`ZSECTIONRECORD`): one section per day, "Questions";
/// - `Question` (`ZQUESTION`): position, text, answer (NULL when blank) and the template question it came from.
///
/// Like a Core Data entity migration policy, every old record must land in the new shape or the migration fails
/// (and the document stays as it was): a date that is not a valid `yyyy-MM-dd` day, an array that cannot be read,
/// or more answers than questions stop it with an error naming the record.
public enum DiaryApp {
    public static let modelName = "Diary"
    public static let sectionTitle = "Questions"
    public static let templateName = "Daily questions"

    /// Entity numbers of the version 2 model (version 1 had QuestionList = 1, DayRecord = 2).
    enum Entity {
        static let dayRecord = 2, template = 3, templateQuestion = 4, sectionRecord = 5, question = 6
    }

    public static var migrator: DocumentMigrator {
        var migrator = DocumentMigrator(modelName: modelName, modelVersion: "2")
        migrator.registerMigration("Diary-2-templates-and-sections") { db in
            try migrateToVersion2(db)
        }
        return migrator
    }

    /// Why a version 1 record cannot be moved into version 2.
    public struct TransformError: Error, CustomStringConvertible {
        public var description: String
    }

    /// The tables version 2 adds, beside version 1's until the records are moved.
    static let version2Tables = """
        CREATE TABLE ZTEMPLATE (Z_PK INTEGER PRIMARY KEY, Z_ENT INTEGER, Z_OPT INTEGER, ZNAME VARCHAR);
        CREATE TABLE ZTEMPLATEQUESTION (Z_PK INTEGER PRIMARY KEY, Z_ENT INTEGER, Z_OPT INTEGER,
            ZTEMPLATE INTEGER, ZPOSITION INTEGER, ZTEXT VARCHAR);
        CREATE TABLE ZDAYRECORD_2 (Z_PK INTEGER PRIMARY KEY, Z_ENT INTEGER, Z_OPT INTEGER, ZDAY VARCHAR NOT NULL,
            ZDATE TIMESTAMP NOT NULL, ZTEMPLATE INTEGER, ZPHOTO BLOB);
        CREATE TABLE ZSECTIONRECORD (Z_PK INTEGER PRIMARY KEY, Z_ENT INTEGER, Z_OPT INTEGER,
            ZDAYRECORD INTEGER, ZPOSITION INTEGER, ZTITLE VARCHAR);
        CREATE TABLE ZQUESTION (Z_PK INTEGER PRIMARY KEY, Z_ENT INTEGER, Z_OPT INTEGER,
            ZSECTIONRECORD INTEGER, ZPOSITION INTEGER, ZTEXT VARCHAR,
            ZANSWER VARCHAR, ZTEMPLATEQUESTION INTEGER);
        CREATE INDEX ZTEMPLATEQUESTION_ZTEMPLATE_INDEX ON ZTEMPLATEQUESTION (ZTEMPLATE);
        CREATE INDEX ZSECTIONRECORD_ZDAYRECORD_INDEX ON ZSECTIONRECORD (ZDAYRECORD);
        CREATE INDEX ZQUESTION_ZSECTIONRECORD_INDEX ON ZQUESTION (ZSECTIONRECORD);
        """

    static func migrateToVersion2(_ db: Database) throws {
        try db.execute(sql: version2Tables)

        // > Templates from the question lists (normally one).
        var templateQuestions: [String: Int64] = [:]  // text -> template question of the first template
        var firstTemplate: Int64?
        var templateKey: Int64 = 0, templateQuestionKey: Int64 = 0
        for row in try Row.fetchAll(db, sql: "SELECT Z_PK, ZQUESTIONS FROM ZQUESTIONLIST ORDER BY Z_PK") {
            let listKey: Int64 = row[0]
            let questions = try unarchive(row[1], what: "QuestionList \(listKey)")
            templateKey += 1
            firstTemplate = firstTemplate ?? templateKey
            try db.execute(sql: "INSERT INTO ZTEMPLATE VALUES (?, ?, 1, ?)",
                           arguments: [templateKey, Entity.template, templateKey == 1 ? templateName : "\(templateName) \(templateKey)"])
            for (position, text) in questions.enumerated() {
                templateQuestionKey += 1
                try db.execute(sql: "INSERT INTO ZTEMPLATEQUESTION VALUES (?, ?, 1, ?, ?, ?)",
                               arguments: [templateQuestionKey, Entity.templateQuestion, templateKey, position, text])
                if templateKey == firstTemplate, let text, templateQuestions[text] == nil {
                    templateQuestions[text] = templateQuestionKey
                }
            }
        }

        // > Every day: its date string into a floating day, its parallel arrays into a section of questions.
        var sectionKey: Int64 = 0, questionKey: Int64 = 0
        for row in try Row.fetchAll(db, sql: "SELECT Z_PK, ZDATE, ZQUESTIONS, ZANSWERS, ZPHOTO FROM ZDAYRECORD ORDER BY Z_PK") {
            let key: Int64 = row[0]
            let what = "DayRecord \(key)"
            guard let dateText: String = row[1], let day = CalendarDay(dateText) else {
                throw TransformError(description: "\(what): the date \(String(describing: row[1] as String?)) is not a yyyy-MM-dd day")
            }
            let questions = try unarchive(row[2], what: what)
            var answers = try unarchive(row[3], what: what)
            guard answers.count <= questions.count else {
                throw TransformError(description: "\(what): \(answers.count) answers for \(questions.count) questions")
            }
            answers += Array(repeating: nil, count: questions.count - answers.count)
            try db.execute(sql: "INSERT INTO ZDAYRECORD_2 VALUES (?, ?, 1, ?, ?, ?, ?)",
                           arguments: [key, Entity.dayRecord, day.description, day.coreDataTimestamp, firstTemplate,
                                       row[4] as DatabaseValue])
            sectionKey += 1
            try db.execute(sql: "INSERT INTO ZSECTIONRECORD VALUES (?, ?, 1, ?, 0, ?)",
                           arguments: [sectionKey, Entity.sectionRecord, key, sectionTitle])
            for (position, question) in questions.enumerated() {
                questionKey += 1
                try db.execute(sql: "INSERT INTO ZQUESTION VALUES (?, ?, 1, ?, ?, ?, ?, ?)",
                               arguments: [questionKey, Entity.question, sectionKey, position, question,
                                           answers[position], question.flatMap { templateQuestions[$0] }])
            }
        }

        // > Destructive steps, explicit: the old blobs go, the new day table takes the old name.
        try db.execute(sql: """
            DROP TABLE ZDAYRECORD;
            ALTER TABLE ZDAYRECORD_2 RENAME TO ZDAYRECORD;
            DROP TABLE ZQUESTIONLIST;
            DELETE FROM Z_PRIMARYKEY WHERE Z_NAME = 'QuestionList';
            """)
        for (number, name, max) in [(Entity.template, "Template", templateKey),
                                    (Entity.templateQuestion, "TemplateQuestion", templateQuestionKey),
                                    (Entity.sectionRecord, "SectionRecord", sectionKey),
                                    (Entity.question, "Question", questionKey)] {
            try db.execute(sql: "INSERT OR REPLACE INTO Z_PRIMARYKEY(Z_ENT, Z_NAME, Z_SUPER, Z_MAX) VALUES (?, ?, 0, ?)",
                           arguments: [number, name, max])
        }
    }

    /// An archived array of strings as version 1 wrote it (a property list array; `$null` for a blank).
    static func unarchive(_ value: DatabaseValue, what: String) throws -> [String?] {
        guard case .blob(let data) = value.storage else {
            if value.isNull { return [] }
            throw TransformError(description: "\(what): the archived array is not a blob")
        }
        let object: Any
        do {
            object = try PropertyListSerialization.propertyList(from: data, format: nil)
        } catch {
            throw TransformError(description: "\(what): the archived array cannot be read (\(error))")
        }
        guard let array = object as? [Any] else {
            throw TransformError(description: "\(what): the archive does not hold an array")
        }
        return try array.map { element in
            guard let string = element as? String else {
                throw TransformError(description: "\(what): the archived array holds something other than text")
            }
            return string == "$null" ? nil : string
        }
    }

    /// A calendar day with no time zone: `2017-12-30`.
    public struct CalendarDay: Equatable, Sendable, CustomStringConvertible {
        public var year: Int, month: Int, day: Int

        /// The Gregorian calendar in UTC: the only calendar the migration uses, whatever the process's time zone.
        static let utc: Calendar = {
            var calendar = Calendar(identifier: .gregorian)
            calendar.timeZone = TimeZone(identifier: "UTC")!
            return calendar
        }()

        /// Parses exactly `yyyy-MM-dd` and checks that the day exists (`2018-02-30` does not).
        public init?(_ text: String) {
            let parts = text.split(separator: "-", omittingEmptySubsequences: false)
            guard parts.count == 3, parts[0].count == 4, parts[1].count == 2, parts[2].count == 2,
                  parts.allSatisfy({ $0.allSatisfy { $0.isASCII && $0.isNumber } }),
                  let year = Int(parts[0]), let month = Int(parts[1]), let day = Int(parts[2]),
                  let date = Self.utc.date(from: DateComponents(year: year, month: month, day: day)),
                  Self.utc.dateComponents([.year, .month, .day], from: date) == DateComponents(year: year, month: month, day: day)
            else { return nil }
            (self.year, self.month, self.day) = (year, month, day)
        }

        /// The day a floating timestamp stands for (read with the UTC calendar).
        public init(coreDataTimestamp: Double) {
            let components = Self.utc.dateComponents([.year, .month, .day],
                                                     from: Date(timeIntervalSinceReferenceDate: coreDataTimestamp))
            (year, month, day) = (components.year!, components.month!, components.day!)
        }

        public var description: String {
            String(format: "%04d-%02d-%02d", year, month, day)
        }

        /// Midnight UTC of this day, in seconds since 2001-01-01T00:00:00Z (Core Data's reference date).
        public var coreDataTimestamp: Double {
            Self.utc.date(from: DateComponents(year: year, month: month, day: day))!.timeIntervalSinceReferenceDate
        }
    }

    /// One day as version 2 shows it.
    public struct Day: Codable, Sendable, Equatable {
        public var day: String
        public var questions: [String?]
        public var answers: [String?]
        public var hasPhoto: Bool

        public init(day: String, questions: [String?], answers: [String?], hasPhoto: Bool) {
            self.day = day
            self.questions = questions
            self.answers = answers
            self.hasPhoto = hasPhoto
        }
    }

    public struct Summary: Codable, Sendable, Equatable {
        public var templates: [String: [String]]
        public var days: [Day]
    }

    public static func summary(_ db: Database) throws -> Summary {
        var templates: [String: [String]] = [:]
        for row in try Row.fetchAll(db, sql: """
            SELECT t.ZNAME, q.ZTEXT FROM ZTEMPLATE t JOIN ZTEMPLATEQUESTION q ON q.ZTEMPLATE = t.Z_PK
            ORDER BY t.Z_PK, q.ZPOSITION
            """) {
            templates[row[0], default: []].append(row[1])
        }
        var days: [Day] = []
        for row in try Row.fetchAll(db, sql: "SELECT Z_PK, ZDATE, ZPHOTO IS NOT NULL FROM ZDAYRECORD ORDER BY ZDATE") {
            let questions = try Row.fetchAll(db, sql: """
                SELECT q.ZTEXT, q.ZANSWER FROM ZSECTIONRECORD s JOIN ZQUESTION q ON q.ZSECTIONRECORD = s.Z_PK
                WHERE s.ZDAYRECORD = ? ORDER BY s.ZPOSITION, q.ZPOSITION
                """, arguments: [row[0] as Int64])
            days.append(Day(day: CalendarDay(coreDataTimestamp: row[1]).description,
                            questions: questions.map { $0[0] }, answers: questions.map { $0[1] }, hasPhoto: row[2]))
        }
        return Summary(templates: templates, days: days)
    }
}
