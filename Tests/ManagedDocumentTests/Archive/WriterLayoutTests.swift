import Foundation
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

/// The writer lays down every byte of a bundle itself (no other library's output is patched): each entry's local
/// header, data descriptor and central record are checked here by a parser nobody here wrote (python's zipfile, plus
/// a walk over the raw bytes in python), against the layout FORMAT.md 3, 4 and 8 give.
@Suite("The zip writer's own layout, read by an independent parser")
struct WriterLayoutTests {
    enum Shape: String, CaseIterable, CustomTestStringConvertible {
        case deflateFast, deflateZlib, store, zip64
        var testDescription: String { rawValue }
        var options: WritingOptions {
            let compression: WritingOptions.Compression = switch self {
            case .deflateFast, .zip64: .deflate(level: 2)
            case .deflateZlib: .deflate(level: 6)
            case .store: .store
            }
            var options = WritingOptions(compression: compression)
            options.forcesZIP64 = self == .zip64
            options.compressionThreads = 2
            return options
        }
    }

    /// Every entry as python's zipfile reads the central directory, with what the raw bytes say at its local header
    /// and after its data (the data descriptor), and where the next entry and the directory start.
    static let walker = #"""
        import json, struct, sys, zipfile
        path = sys.argv[1]
        raw = open(path, 'rb').read()
        z = zipfile.ZipFile(path)
        assert z.testzip() is None, 'a CRC-32 does not match'
        def fields(extra):
            ids, at = [], 0
            while at + 4 <= len(extra):
                fid, n = struct.unpack('<HH', extra[at:at + 4])
                ids.append(fid)
                at += 4 + n
            return ids
        out = []
        for info in z.infolist():
            o = info.header_offset
            sig, version, flags, method, _, _, crc, csize, usize, nlen, elen = struct.unpack('<IHHHHHIIIHH', raw[o:o + 30])
            name = raw[o + 30:o + 30 + nlen]
            lextra = raw[o + 30 + nlen:o + 30 + nlen + elen]
            end = o + 30 + nlen + elen + info.compress_size
            record = dict(name=info.filename, flags=info.flag_bits, method=info.compress_type, crc=info.CRC,
                          csize=info.compress_size, usize=info.file_size, offset=o,
                          centralExtra=fields(info.extra), localExtra=fields(lextra), localSignature=sig,
                          localFlags=flags, localMethod=method, localName=name.decode('utf-8'),
                          dataEnd=end, descriptorEnd=end)
            if flags & 8:
                wide = 1 in fields(lextra)
                fmt = '<IIQQ' if wide else '<IIII'
                dsig, dcrc, dcsize, dusize = struct.unpack(fmt, raw[end:end + struct.calcsize(fmt)])
                record.update(descriptor=[dsig, dcrc, dcsize, dusize], descriptorEnd=end + struct.calcsize(fmt))
            out.append(record)
        directory = z.start_dir
        print(json.dumps(dict(entries=out, directory=directory)))
        """#

    struct Walk: Decodable {
        struct Entry: Decodable {
            var name: String
            var flags: Int
            var method: Int
            var crc: UInt32
            var csize: UInt64
            var usize: UInt64
            var offset: UInt64
            var centralExtra: [Int]
            var localExtra: [Int]
            var localSignature: UInt32
            var localFlags: Int
            var localMethod: Int
            var localName: String
            var dataEnd: UInt64
            var descriptorEnd: UInt64
            var descriptor: [UInt64]?
        }
        var entries: [Entry]
        var directory: UInt64
    }

    static func walk(_ bundle: FilePath) throws -> Walk {
        try JSONDecoder().decode(Walk.self, from: Data(try Python.run(walker, [bundle.string]).utf8))
    }

    /// A bundle with a store of a few MiB (deflated on two threads), external data, an empty file, a non-ASCII
    /// name and a file of one byte.
    static func makeBundle(_ shape: Shape, in directory: FilePath) throws -> FilePath {
        let store = try Fixtures.makeStore(at: directory.appending("store.sqlite"), rows: 9_000, blobSize: 200)
        let additional = directory.appending("AdditionalContent")
        try FileSystem.createDirectory(additional)
        try Fixtures.write([], to: additional.appending("empty.txt"))
        try Fixtures.write(Array("grüße, 日本".utf8), to: additional.appending("Grüße-日本.txt"))
        try Fixtures.write([0x41], to: additional.appending("one.txt"))
        let bundle = directory.appending("Doc.mdz")
        try Fixtures.makeBundle(at: bundle, store: store, additionalContent: additional, options: shape.options)
        return bundle
    }

    @Test("each entry is a local header, its data and a data descriptor, end to end, as the central directory says",
          arguments: Shape.allCases)
    func layout(_ shape: Shape) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.makeBundle(shape, in: directory)
            let walk = try Self.walk(bundle)
            let mimetype = try #require(walk.entries.first)
            #expect(mimetype.name == "mimetype" && mimetype.offset == 0 && mimetype.flags == 0)
            #expect(mimetype.centralExtra.isEmpty && mimetype.localExtra.isEmpty && mimetype.method == 0)
            #expect(walk.entries.count == 7, "\(walk.entries.map(\.name))")  // with the store index (version 3)
            var expectedOffset = mimetype.descriptorEnd
            for entry in walk.entries.dropFirst() {
                #expect(entry.offset == expectedOffset, "\(entry.name): no bytes between entries but descriptors")
                expectedOffset = entry.descriptorEnd
                #expect(entry.localSignature == ZipLocalHeader.signature && entry.localName == entry.name)
                #expect(entry.localMethod == entry.method, "\(entry.name): one method in both headers")
                #expect(entry.flags & 0x0008 != 0 && entry.localFlags == entry.flags, "\(entry.name)")
                let isASCII = entry.name.utf8.allSatisfy { $0 < 0x80 }
                #expect((entry.flags & 0x0800 != 0) == !isASCII, "\(entry.name): UTF-8 flag exactly for non-ASCII")
                let wide = shape == .zip64
                #expect(entry.localExtra == (wide ? [0x0001, 0x5455] : [0x5455]), "\(entry.name)")
                #expect(entry.centralExtra == (wide ? [0x0001, 0x5455] : [0x5455]), "\(entry.name)")
                #expect(entry.descriptor == [UInt64(ZipStreamedEntry.descriptorSignature), UInt64(entry.crc),
                                             entry.csize, entry.usize], "\(entry.name)")
                if shape == .store || entry.name == BundleLayout.storeIndex {
                    // > The store index is stored whatever the compression (FORMAT.md 13.2: read in place).
                    #expect(entry.method == 0 && entry.csize == entry.usize, "\(entry.name)")
                } else {
                    #expect(entry.method == 8, "\(entry.name): deflated, the empty file too")
                }
            }
            #expect(walk.directory == expectedOffset, "the central directory follows the last descriptor")
            let listing = try run("unzip", ["-Z1", bundle.string])
            #expect(listing.output.contains("AdditionalContent/Grüße-日本.txt"), "\(listing.output)")
            let reader = try BundleReader(at: bundle)
            _ = try reader.verify(full: true)
            let out = try reader.extract(into: directory.appending("out"))
            #expect(try Fixtures.bytes(of: out.store) == Fixtures.bytes(of: directory.appending("store.sqlite")))
        }
    }

    @Test("the bytes depend only on the content and the options: two writes of one content are identical")
    func deterministic() async throws {
        try await withTemporaryDirectory { directory in
            let store = try Fixtures.makeStore(at: directory.appending("store.sqlite"), rows: 9_000, blobSize: 200)
            var digests: Set<[UInt8]> = []
            for (index, threads) in [0, 1, 2].enumerated() {
                var options = WritingOptions(compression: .deflate(level: 6))
                options.compressionThreads = threads
                options.modificationTime = Date(timeIntervalSince1970: 1_700_000_000)
                let bundle = directory.appending("Doc-\(index).mdz")
                var metadata = DocumentMetadata()
                metadata.documentID = UUID(uuidString: "00000000-0000-4000-8000-000000000001")!
                metadata.createdAt = Date(timeIntervalSince1970: 1_700_000_000)
                try BundleWriter.write(BundleContent(store: store), metadata: metadata, to: bundle, options: options)
                digests.insert(try Fixtures.bytes(of: bundle))
            }
            #expect(digests.count == 1, "the same file on 0, 1 and 2 compression threads")
        }
    }
}
