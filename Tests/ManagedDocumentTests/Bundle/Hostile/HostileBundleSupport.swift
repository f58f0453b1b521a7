// The hostile-bundle suite: bundles damaged one way each, refused with the right error, with nothing written
// outside the working place. One file per docs/FORMAT.md section, HostileBundleTests+<Section>.swift; this
// file holds the suite and what its files share (and DeflateRestartTests uses `expectRefusal` too).

import Foundation
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

/// Where a hostile bundle is expected to be caught.
enum RefusalStep: String, Sendable, CustomTestStringConvertible {
    /// `BundleReader(at:)`: the structural checks.
    case open
    /// `extract(into:)`: the streaming checks.
    case extract
    /// `verify(full: false, workingDirectory:)`: the streaming checks and SQLite's.
    case verify

    var testDescription: String { rawValue }
}

/// Takes `bundle` through `step` and checks that it is refused with one of `codes`, that the error names the bundle
/// and `entry`, and that nothing was written anywhere but into `<directory>/out`, left empty or absent.
@discardableResult
func expectRefusal(
    _ bundle: FilePath, in directory: FilePath, at step: RefusalStep = .open, codes: [DocumentError.Code],
    entries: [String?], limits: ReadingLimits = .default, sourceLocation: SourceLocation = #_sourceLocation
) throws -> DocumentError? {
    let out = directory.appending("out")
    let error = #expect(throws: DocumentError.self, "\(bundle.lastComponent!) should be refused at \(step)",
                        sourceLocation: sourceLocation) {
        let reader = try BundleReader(at: bundle, limits: limits)
        switch step {
        case .open: break
        case .extract: try reader.extract(into: out)
        case .verify:
            try FileSystem.createDirectory(out)
            _ = try reader.verify(full: false, workingDirectory: out)
        }
    }
    if let error {
        #expect(codes.contains(error.code), "expected \(codes), got \(error.code): \(error)",
                sourceLocation: sourceLocation)
        #expect(error.path == bundle, "the error should name the bundle: \(error)", sourceLocation: sourceLocation)
        #expect(entries.contains(error.entry), "the error should name entry \(entries): \(error)",
                sourceLocation: sourceLocation)
    }
    try expectNothingWrittenOutside(directory, besides: bundle, sourceLocation: sourceLocation)
    return error
}

@discardableResult
func expectRefusal(
    _ bundle: FilePath, in directory: FilePath, at step: RefusalStep = .open, code: DocumentError.Code,
    entry: String?, limits: ReadingLimits = .default, sourceLocation: SourceLocation = #_sourceLocation
) throws -> DocumentError? {
    try expectRefusal(bundle, in: directory, at: step, codes: [code], entries: [entry], limits: limits,
                      sourceLocation: sourceLocation)
}

@discardableResult
func expectRefusal(
    _ bundle: FilePath, in directory: FilePath, at step: RefusalStep = .open, codes: [DocumentError.Code],
    entry: String?, limits: ReadingLimits = .default, sourceLocation: SourceLocation = #_sourceLocation
) throws -> DocumentError? {
    try expectRefusal(bundle, in: directory, at: step, codes: codes, entries: [entry], limits: limits,
                      sourceLocation: sourceLocation)
}

/// The test's folder holds only the bundle and `out`, and `out` is empty or absent.
func expectNothingWrittenOutside(_ directory: FilePath, besides bundle: FilePath,
                                 sourceLocation: SourceLocation = #_sourceLocation) throws {
    let names = try FileSystem.contentsOfDirectory(directory)
    #expect(Set(names).subtracting(["out"]) == [bundle.lastComponent!.string],
            "the test folder should hold only the bundle and 'out': \(names)", sourceLocation: sourceLocation)
    let out = directory.appending("out")
    if FileSystem.isDirectory(out) {
        let left = try FileSystem.contentsOfDirectory(out)
        #expect(left.isEmpty, "'out' should be empty after a refusal: \(left)", sourceLocation: sourceLocation)
    }
}

@Suite("Hostile bundles are refused with the right error and write nothing outside the working place")
struct HostileBundleTests {
    static let readme = "AdditionalContent/readme.txt"
    static let picture = "AdditionalContent/images/pic.raw"

    /// A good bundle with external data and additional content, `Notes.mdz` in `directory`.
    static func goodBundle(in directory: FilePath, options: WritingOptions = WritingOptions()) throws -> FilePath {
        let bundle = directory.appending("Notes.mdz")
        try Fixtures.makeBundle(at: bundle, rows: 20, withFolders: true, options: options)
        return bundle
    }

    /// A good bundle whose `AdditionalContent/readme.txt` entry is renamed to `raw`.
    static func bundle(renamingReadmeTo raw: [UInt8], in directory: FilePath) throws -> FilePath {
        let bundle = try goodBundle(in: directory)
        try ZipSurgery.edit(bundle) { $0.modify(readme) { $0.rename(to: raw) } }
        return bundle
    }
}
