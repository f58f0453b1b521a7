// The process that scripts/bench-bundle.sh times: one library call per run, nothing else.
//
//   bundle-benchmark pack STORE BUNDLE LEVEL   LEVEL 0 = store, 1...9 = deflate at that level
//   bundle-benchmark unpack BUNDLE DIR         DIR must not exist or be empty
//
// Plain arguments on purpose: no argument parser, so the timed process holds only the library.
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import ManagedDocument
import SystemPackage

@main
struct BundleBenchmark {
    static let usage = """
        usage: bundle-benchmark pack STORE BUNDLE LEVEL   (LEVEL 0 = store, 1...9 = deflate)
               bundle-benchmark unpack BUNDLE DIR
        """

    static func main() {
        let arguments = Array(CommandLine.arguments.dropFirst())
        do {
            switch (arguments.first, arguments.count) {
            case ("pack", 4):
                guard let level = Int(arguments[3]), (0...9).contains(level) else {
                    fail("LEVEL must be 0...9, not \(arguments[3])\n\(usage)", status: 64)
                }
                try BundleWriter.write(
                    BundleContent(store: FilePath(arguments[1])), metadata: DocumentMetadata(),
                    to: FilePath(arguments[2]),
                    options: WritingOptions(compression: level == 0 ? .store : .deflate(level: level)))
            case ("unpack", 3):
                try BundleReader(at: FilePath(arguments[1])).extract(into: FilePath(arguments[2]))
            default:
                fail(usage, status: 64)
            }
        } catch {
            fail("bundle-benchmark: \(error)", status: 1)
        }
    }

    static func fail(_ message: String, status: Int32) -> Never {
        _ = try? FileDescriptor.standardError.writeAll((message + "\n").utf8)
        exit(status)
    }
}
