import Foundation
import ZIPFoundation

/// The Swift peer of scripts/bench-bundle.sh: packs one file into a zip, or unpacks a zip, with ZIPFoundation, the
/// zip library Swift users already know. It does what an app would write with it, nothing more (no fsync).
///
///   zipfoundation-peer pack FILE ZIP store|deflate
///   zipfoundation-peer unpack ZIP FOLDER
@main
struct ZIPFoundationPeer {
    static func main() throws {
        let arguments = CommandLine.arguments
        guard arguments.count == 5 && arguments[1] == "pack" || arguments.count == 4 && arguments[1] == "unpack" else {
            FileHandle.standardError.write(Data("usage: zipfoundation-peer pack FILE ZIP store|deflate | unpack ZIP FOLDER\n".utf8))
            exit(64)
        }
        if arguments[1] == "pack" {
            let file = URL(fileURLWithPath: arguments[2])
            let archive = try Archive(url: URL(fileURLWithPath: arguments[3]), accessMode: .create)
            try archive.addEntry(with: file.lastPathComponent, relativeTo: file.deletingLastPathComponent(),
                                 compressionMethod: arguments[4] == "store" ? .none : .deflate)
        } else {
            try FileManager().unzipItem(at: URL(fileURLWithPath: arguments[2]), to: URL(fileURLWithPath: arguments[3]))
        }
    }
}
