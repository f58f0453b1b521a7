import ArgumentParser
import Foundation
import GRDB
import SampleApps

/// The time-tracking sample: converts `minimalTime.sqlite` (whose last events live only in its -wal) and raises the
/// document to compatibility level 1, which gives every Event and Tag a GUID, once.
///
/// ```
/// time-app --folder samples-run/apps
/// time-app --folder samples-run/apps --add "Reading" --minutes 45
/// ```
@main
struct TimeAppCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "time-app",
        abstract: "Sample: a time-tracking app's document, converted from minimalTime.sqlite, GUIDs at level 1.")

    @OptionGroup var options: SampleAppOptions
    @Option(help: "Record an event with this title, ending now.") var add: String?
    @Option(help: "The recorded event's length in minutes.") var minutes = 30

    func run() async throws {
        var edit: (@Sendable (Database) throws -> Void)?
        if let title = add {
            let end = Date()
            let start = end - Double(minutes * 60)
            edit = { db in try TimeApp.addEvent(title, start: start, end: end, db) }
        }
        try await options.launch(TimeApp.self, edit: edit)
    }
}
