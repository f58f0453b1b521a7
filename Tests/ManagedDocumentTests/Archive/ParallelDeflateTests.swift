import Crypto
import Foundation
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

/// Large entries are deflated on several threads (slices joined at sync points into one deflate stream); the
/// result must be an ordinary deflated zip entry to every reader, byte for byte the input.
@Suite("Entries deflated on several threads read back byte for byte, in every zip tool")
struct ParallelDeflateTests {
    /// A compressible but not trivial file: text lines with numbers, runs and a sprinkle of random bytes.
    static func compressibleBytes(count: Int, seed: UInt64) -> [UInt8] {
        var generator = SeededGenerator(seed: seed)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count + 128)
        var line = 0
        while bytes.count < count {
            line += 1
            bytes += Array("row \(line) value \(UInt32.random(in: 0...999_999, using: &generator)) ".utf8)
            if line % 5 == 0 { bytes += (0..<24).map { _ in UInt8.random(in: 0...255, using: &generator) } }
            if line % 11 == 0 { bytes += [UInt8](repeating: UInt8(line % 251), count: Int(line % 97)) }
            bytes.append(0x0A)
        }
        return Array(bytes.prefix(count))
    }

    static func sha256(_ bytes: [UInt8]) -> String { SHA256.hash(data: bytes).hexString }

    /// The local header's method and flags for an entry, read where the central directory says it starts.
    static func localHeader(of name: String, in bundle: FilePath) throws -> (method: UInt16, flags: UInt16) {
        let reader = try BundleReader(at: bundle)
        let entry = try #require(reader.entries.first { $0.name == name })
        let bytes = try Fixtures.bytes(of: bundle)
        let offset = Int(entry.offset)
        #expect(bytes.readLE32(at: offset) == ZipLocalHeader.signature)
        return (bytes.readLE16(at: offset + 8), bytes.readLE16(at: offset + 6))
    }

    enum Case: String, CaseIterable, CustomTestStringConvertible {
        case level1TwoThreads, level2OneThread, level2CallingThread, level3TwoThreads, level6ThreeThreads
        case zip64TwoThreads
        var testDescription: String { rawValue }
        var options: WritingOptions {
            let level = switch self {
            case .level1TwoThreads: 1
            case .level3TwoThreads: 3
            case .level6ThreeThreads: 6
            default: WritingOptions.defaultDeflateLevel
            }
            var options = WritingOptions(compression: .deflate(level: level))
            options.compressionThreads = switch self {
            case .level6ThreeThreads: 3
            case .level2OneThread: 1
            case .level2CallingThread: 0
            default: 2
            }
            options.forcesZIP64 = self == .zip64TwoThreads
            return options
        }
    }

    @Test("a store of several MiB is deflated on several threads and reads back identical", arguments: Case.allCases)
    func storeRoundTrip(_ shape: Case) async throws {
        try await withTemporaryDirectory { directory in
            let store = try Fixtures.makeStore(at: directory.appending("store.sqlite"), rows: 14_000, blobSize: 200)
            let size = try #require(try FileSystem.status(store)).size
            #expect(size > 3 * ArchiveWriter.parallelDeflateThreshold, "the store must take the parallel path")
            let bundle = directory.appending("Doc.mdz")
            let metadata = try BundleWriter.write(BundleContent(store: store), metadata: DocumentMetadata(),
                                                  to: bundle, options: shape.options)

            let header = try Self.localHeader(of: BundleLayout.store, in: bundle)
            #expect(header.method == 8, "deflated")
            #expect(header.flags & 0x0008 != 0, "CRC-32 and sizes in a data descriptor (FORMAT.md 8)")
            let reader = try BundleReader(at: bundle)
            let entry = try #require(reader.entries.first { $0.role == .store })
            #expect(entry.isCompressed && entry.size == UInt64(size) && entry.compressedSize < entry.size * 9 / 10)
            #expect(reader.isZIP64 == (shape == .zip64TwoThreads))
            let report = try reader.verify(full: true)
            #expect(report.sqliteCheck == "integrity_check")

            let extracted = try reader.extract(into: directory.appending("out"))
            let source = try Fixtures.bytes(of: store)
            let back = try Fixtures.bytes(of: extracted.store)
            #expect(back == source, "byte for byte")
            #expect(metadata.store.digest == Fixtures.storeDigest(of: source, interval: metadata.store.segments?.interval))
            #expect(try Fixtures.rowDigests(of: extracted.store) == Fixtures.rowDigests(of: store))

            // Tools nobody here wrote inflate the joined stream and check its CRC-32.
            let unzip = try run("unzip", ["-t", bundle.string])
            #expect(unzip.status == 0 && unzip.output.contains("No errors detected"), "\(unzip.output)")
            let sevenZip = try run("7z", ["t", bundle.string])
            #expect(sevenZip.status == 0 && sevenZip.output.contains("Everything is Ok"), "\(sevenZip.output)")
            let python = try run("python3", ["-m", "zipfile", "-t", bundle.string])
            #expect(python.status == 0 && !python.output.contains("corrupted"), "\(python.output)")
            let zipT = try run("zip", ["-T", bundle.string])
            #expect(zipT.status == 0, "\(zipT.output)")
            let bsdtar = try run("bsdtar", ["-xf", bundle.string, "-C", directory.appending("out").string,
                                            BundleLayout.store])
            #expect(bsdtar.status == 0, "\(bsdtar.output)")
            let unzipped = directory.appending("unzipped")
            #expect(try run("unzip", ["-q", bundle.string, BundleLayout.store, "-d", unzipped.string]).status == 0)
            #expect(try Fixtures.bytes(of: unzipped.appending(BundleLayout.store)) == source)
        }
    }

    @Test("entries at and around slice boundaries, deflated on two threads, read back identical",
          arguments: [2, 6])
    func sliceBoundaries(level: Int) async throws {
        try await withTemporaryDirectory { directory in
            let slice = ParallelDeflater.sliceSize(forLevel: level)
            let threshold = Int(ArchiveWriter.parallelDeflateThreshold)
            var sizes = [threshold, threshold + 1, threshold + slice - 1, threshold + slice + 1,
                         3 * threshold + 17, threshold - 1]
            // > Below the threshold ISA-L's levels deflate on the calling thread, in the same slices.
            sizes += [0, 1, 700, slice - 1, slice, slice + 1, 2 * slice + 3]
            let store = try Fixtures.makeStore(at: directory.appending("store.sqlite"), rows: 20)
            let additional = directory.appending("AdditionalContent")
            try FileSystem.createDirectory(additional)
            var expected: [String: [UInt8]] = [:]
            for (index, size) in sizes.enumerated() {
                let name = "file-\(index)-\(size).txt"
                let bytes = Self.compressibleBytes(count: size, seed: UInt64(index + 1))
                try Fixtures.write(bytes, to: additional.appending(name))
                expected[BundleLayout.additionalContentPrefix + name] = bytes
            }
            var options = WritingOptions(compression: .deflate(level: level))
            options.compressionThreads = 2
            let bundle = directory.appending("Doc.mdz")
            try BundleWriter.write(BundleContent(store: store, additionalContent: additional),
                                   metadata: DocumentMetadata(), to: bundle, options: options)
            let reader = try BundleReader(at: bundle)
            try reader.verifyEntries()
            let out = directory.appending("out")
            #expect(try run("unzip", ["-q", bundle.string, "-d", out.string]).status == 0)
            for (name, bytes) in expected {
                let entry = try #require(reader.entries.first { $0.name == name })
                #expect(entry.isCompressed || bytes.isEmpty, "\(name) is deflated")
                #expect(try Fixtures.bytes(of: out.appending(name)) == bytes, "\(name) reads back identical")
            }
            let unzip = try run("unzip", ["-t", bundle.string])
            #expect(unzip.status == 0, "\(unzip.output)")
        }
    }

    @Test("zlib's slices are one stream whatever the threads, within 1.5 % of the size of zlib's own one stream")
    func sameContentAsOneStream() async throws {
        try await withTemporaryDirectory { directory in
            let store = try Fixtures.makeStore(at: directory.appending("store.sqlite"), rows: 12_000, blobSize: 200)
            var sizes: [Int: UInt64] = [:]
            var streams: Set<[UInt8]> = []
            var digests: Set<String> = []
            for threads in [0, 2] {
                var options = WritingOptions(compression: .deflate(level: 6))
                options.compressionThreads = threads
                let bundle = directory.appending("Doc-\(threads).mdz")
                let metadata = try BundleWriter.write(BundleContent(store: store), metadata: DocumentMetadata(),
                                                      to: bundle, options: options)
                let reader = try BundleReader(at: bundle)
                let entry = try #require(reader.entries.first { $0.role == .store })
                sizes[threads] = entry.compressedSize
                let bytes = try Fixtures.bytes(of: bundle)
                streams.insert(Array(bytes[Int(entry.dataOffset)...].prefix(Int(entry.compressedSize))))
                let extracted = try reader.extract(into: directory.appending("out-\(threads)"))
                digests.insert(Self.sha256(try Fixtures.bytes(of: extracted.store)))
                digests.insert(metadata.store.segments?.sha256 ?? "")
                digests.insert(Fixtures.storeDigest(of: try Fixtures.bytes(of: extracted.store),
                                                    interval: metadata.store.segments?.interval) ?? "")
                digests.insert(metadata.store.digest ?? "-")
            }
            #expect(digests.count == 3, "one content: one set of segment digests, one store digest (and one SHA-256)")
            #expect(streams.count == 1, "the same deflate stream on the calling thread and on two")
            // The peer: zlib's level 6 as one raw deflate stream over the whole file, made by python's zlib.
            let python = try Python.run("""
                import sys, zlib
                c = zlib.compressobj(6, zlib.DEFLATED, -15)
                data = open(sys.argv[1], 'rb').read()
                print(len(c.compress(data) + c.flush()))
                """, [store.string])
            let oneStream = try #require(UInt64(python.trimmingCharacters(in: .whitespacesAndNewlines)))
            let ratio = Double(sizes[0]!) / Double(oneStream)
            #expect(ratio > 0.985 && ratio < 1.015, "sizes \(sizes), one stream \(oneStream)")
        }
    }

    @Test("ISA-L's slices are the same bytes on any number of threads, a few percent larger than zlib's level 6")
    func fastLevelsDeterministic() async throws {
        try await withTemporaryDirectory { directory in
            let store = try Fixtures.makeStore(at: directory.appending("store.sqlite"), rows: 12_000, blobSize: 200)
            var streams: [Int: [UInt8]] = [:]
            var sizes: [String: UInt64] = [:]
            for (level, threads) in [(2, 0), (2, 1), (2, 3), (6, 2)] {
                var options = WritingOptions(compression: .deflate(level: level))
                options.compressionThreads = threads
                let bundle = directory.appending("Doc-\(level)-\(threads).mdz")
                try BundleWriter.write(BundleContent(store: store), metadata: DocumentMetadata(), to: bundle,
                                       options: options)
                let reader = try BundleReader(at: bundle)
                _ = try reader.verify(full: true)
                let entry = try #require(reader.entries.first { $0.role == .store })
                sizes["\(level)-\(threads)"] = entry.compressedSize
                if level == 2 {
                    let bytes = try Fixtures.bytes(of: bundle)
                    streams[threads] = Array(bytes[Int(entry.dataOffset)...].prefix(Int(entry.compressedSize)))
                }
            }
            #expect(Set(streams.values).count == 1, "one deflate stream whatever the threads")
            let ratio = Double(sizes["2-0"]!) / Double(sizes["6-2"]!)
            #expect(ratio > 0.95 && ratio < 1.10, "sizes \(sizes)")
        }
    }

    @Test("incompressible data deflated by ISA-L is stored in deflate's stored blocks and reads back identical")
    func fastLevelsIncompressible() async throws {
        try await withTemporaryDirectory { directory in
            var generator = SeededGenerator(seed: 11)
            let size = 3 * Int(ArchiveWriter.parallelDeflateThreshold) + 12_345
            let bytes = (0..<size).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let path = directory.appending("Archive.zip")
            let descriptor = try FileDescriptor.open(path, .readWrite, options: [.create, .truncate],
                                                     permissions: [.ownerReadWrite])
            defer { try? descriptor.close() }  // Squash close error of a test file.
            let writer = try ArchiveWriter(descriptor: descriptor, path: path, mediaType: BundleLayout.defaultMediaType,
                                           deflateLevel: 2, modificationTime: 1_700_000_000, compressionThreads: 2)
            try writer.addEntry(named: "AdditionalContent/random.bin", bytes: bytes, compressed: true)
            try writer.addEntry(named: "AdditionalContent/small.bin", bytes: Array(bytes.prefix(70_000)),
                                compressed: true)
            try writer.finish()
            let out = directory.appending("out")
            let unzip = try run("unzip", ["-q", path.string, "-d", out.string])
            #expect(unzip.status == 0, "\(unzip.output)")
            #expect(try Fixtures.bytes(of: out.appending("AdditionalContent/random.bin")) == bytes)
            #expect(try Fixtures.bytes(of: out.appending("AdditionalContent/small.bin")) == Array(bytes.prefix(70_000)))
            let listing = try run("unzip", ["-v", path.string])
            #expect(listing.output.contains("Defl:"), "\(listing.output)")
        }
    }

    @Test("a source that grows or shrinks while it is deflated on several threads is refused, saying which",
          arguments: [2, 6])
    func sourceChangesSize(level: Int) async throws {
        try await withTemporaryDirectory { directory in
            let size = 3 * Int(ArchiveWriter.parallelDeflateThreshold) + 5
            let content = Self.compressibleBytes(count: size + 4096, seed: 3)
            for (available, word) in [(size + 4096, "grew"), (size - 4096, "shrank"), (size + 1, "grew")] {
                let path = directory.appending("Archive-\(available).zip")
                let descriptor = try FileDescriptor.open(path, .readWrite, options: [.create, .truncate],
                                                         permissions: [.ownerReadWrite])
                defer { try? descriptor.close() }  // Squash close error of a test file.
                let writer = try ArchiveWriter(descriptor: descriptor, path: path,
                                               mediaType: BundleLayout.defaultMediaType, deflateLevel: level,
                                               modificationTime: 1_700_000_000, compressionThreads: 2)
                var offset = 0
                let error = #expect(throws: DocumentError.self) {
                    try writer.addEntry(named: BundleLayout.store, size: Int64(size), compressed: true) { buffer in
                        let count = min(buffer.count, available - offset)
                        content.withUnsafeBytes {
                            buffer.baseAddress!.copyMemory(from: $0.baseAddress! + offset, byteCount: count)
                        }
                        offset += count
                        return count
                    }
                }
                #expect(error?.code == .sizeMismatch, "\(String(describing: error))")
                #expect(error?.reason.contains(word) == true, "\(String(describing: error))")
            }
        }
    }
}
