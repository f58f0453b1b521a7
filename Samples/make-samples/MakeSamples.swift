import Foundation
import LegacySamples
import SystemPackage

/// `make-samples [FOLDER]`: writes the legacy sample stores (default `Samples/stores`), replacing that folder.
@main
struct MakeSamples {
    static func main() throws {
        let arguments = CommandLine.arguments.dropFirst()
        let folder = FilePath(arguments.first ?? "Samples/stores")
        if FileManager.default.fileExists(atPath: folder.string) {
            try FileManager.default.removeItem(atPath: folder.string)
        }
        try FileManager.default.createDirectory(atPath: folder.string, withIntermediateDirectories: true)
        let samples = try LegacySamples.makeAll(in: folder)
        for sample in samples {
            let rows = sample.rowCounts.values.reduce(0, +)
            print("\(sample.source.padding(toLength: 20, withPad: " ", startingAt: 0)) \(sample.kind.padding(toLength: 26, withPad: " ", startingAt: 0)) \(rows) rows: \(sample.summary)")
        }
    }
}
