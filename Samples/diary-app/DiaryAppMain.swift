import ArgumentParser
import SampleApps

/// The diary sample: converts `Diary.sqlite` (photos in Core Data external data) and runs the custom migration that
/// turns archived arrays and date strings into templates, days, sections and questions.
///
/// ```
/// diary-app --folder samples-run/apps
/// TZ=Pacific/Kiritimati diary-app --folder other-copy   # same days, whatever the time zone
/// ```
@main
struct DiaryAppCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "diary-app",
        abstract: "Sample: a question-and-answer diary's document, converted from Diary.sqlite and transformed.")

    @OptionGroup var options: SampleAppOptions

    func run() async throws {
        try await options.launch(DiaryApp.self)
    }
}
