import Foundation
import SystemPackage

/// One private folder per fuzzing process, where each input is written as a file.
public final class FuzzScratch: @unchecked Sendable {  // libFuzzer calls the target on one thread
    public let folder: FilePath

    public init(_ name: String) {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("fuzz-\(name)-\(getpid())")
        try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        folder = FilePath(url.path)
    }

    public func write(_ data: UnsafePointer<UInt8>, _ size: Int, named name: String) -> FilePath {
        write(Array(UnsafeBufferPointer(start: data, count: size)), named: name)
    }

    public func write(_ bytes: [UInt8], named name: String) -> FilePath {
        let path = folder.appending(name)
        FileManager.default.createFile(atPath: path.string, contents: Data(bytes))
        return path
    }
}

@_silgen_name("LLVMFuzzerRunDriver")
private func llvmFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<Int32>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32
) -> Int32

/// Runs libFuzzer's driver with `callback` as the target. SwiftPM names an executable's entry point
/// `<module>_main` (and points `main` at it), so each target's entry point calls this instead of libFuzzer's `main`.
public func runFuzzer(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>,
                      _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32) -> Int32 {
    var count = argc
    var arguments: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = argv
    return llvmFuzzerRunDriver(&count, &arguments, callback)
}
