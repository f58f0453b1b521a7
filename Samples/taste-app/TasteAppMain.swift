import ArgumentParser
import GRDB
import SampleApps

/// The taste-tracking sample: converts `TasteB.sqlite`, adds categories (an additive migration), and files every
/// existing restaurant under "Restaurants" once (a compatibility-level fix-up).
///
/// ```
/// taste-app --folder samples-run/apps     # first launch: converted, migrated, fix-up run
/// taste-app --folder samples-run/apps --add "Lucky Peach" --city "New York"
/// taste-app --folder samples-run/apps     # nothing pending: the fix-up does not run again
/// ```
@main
struct TasteAppCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "taste-app",
        abstract: "Sample: a taste-tracking app's document, converted from TasteB.sqlite and migrated.")

    @OptionGroup var options: SampleAppOptions
    @Option(help: "Add a restaurant (not in any category) before the summary.") var add: String?
    @Option(help: "The added restaurant's city.") var city = "Somewhere"

    func run() async throws {
        var edit: (@Sendable (Database) throws -> Void)?
        if let name = add {
            let city = city
            edit = { db in try TasteApp.addRestaurant(name, city: city, category: nil, db) }
        }
        try await options.launch(TasteApp.self, edit: edit)
    }
}
