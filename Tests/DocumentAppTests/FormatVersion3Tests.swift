import Foundation
import GRDB
import ManagedDocument
import SystemPackage
import TestSupport
import Testing

/// Format version 3 (FORMAT.md 13.2), from the public API only: what the writer records in the store index, checked
/// by python on its own; a version 3 bundle read in place, repacked by another zip tool, damaged; every earlier
/// version saved forward to it when the app asks.
@Suite("Format version 3: the store index, written when asked, checked by python, read in place, saved forward")
struct FormatVersion3Tests {
    static let formatOne = FilePath(#filePath).removingLastComponent().removingLastComponent()
        .appending("Fixtures").appending("format-1")

    /// python's own reading of a version 3 bundle (zipfile, hashlib, struct, zlib; nothing of this package): the
    /// index's header, records and hash tree against FORMAT.md 13.2, its root and the store digest against the
    /// metadata, each record's digest and CRC-32 against the store's bytes, and each restart point by inflating its
    /// segment on its own. Prints `3 <restarts|none> <records>`.
    static let independentCheck = """
        import hashlib, json, struct, sys, zipfile, zlib
        path = sys.argv[1]
        archive = zipfile.ZipFile(path)
        metadata = json.loads(archive.read('DocumentMetadata.json'))
        store = metadata['store']
        reference = store['index']
        assert metadata['formatVersion'] == 3 and 'segments' not in store and 'deflateRestarts' not in store
        assert reference['entry'] == 'StoreContent/persistentStore.index'
        data = archive.read('StoreContent/persistentStore')
        index = archive.read(reference['entry'])
        assert archive.getinfo(reference['entry']).compress_type == zipfile.ZIP_STORED, 'index stored'
        magic, record_size, block_size, size, interval, count, flags = struct.unpack_from('<8sIIQQQI', index, 0)
        assert (magic, record_size, block_size) == (b'MDZINDEX', 48, 4096) and index[44:64] == bytes(20)
        assert size == len(data) and interval == reference['interval'] and count == -(-size // interval)
        records = index[64:64 + 48 * count]
        digests = b''.join(records[i * 48:i * 48 + 32] for i in range(count))
        assert digests == b''.join(hashlib.sha256(data[i:i + interval]).digest() for i in range(0, size, interval))
        name = hashlib.sha256(b'MDZ-store-digest-2' + size.to_bytes(8, 'little') + interval.to_bytes(8, 'little') + digests)
        assert store['digest'] == name.hexdigest(), 'store digest'
        def hashes(blob):
            return b''.join(hashlib.sha256(blob[i:i + 4096].ljust(4096, b'\\0')).digest() for i in range(0, len(blob), 4096))
        level, tree = hashes(records), b''
        while len(level) > 32:
            level = level.ljust(-(-len(level) // 4096) * 4096, b'\\0')
            tree += level
            level = hashes(level)
        top = level or hashlib.sha256(b'').digest()
        assert index[64 + 48 * count:] == tree, 'hash tree'
        assert hashlib.sha256(index[:64] + top).hexdigest() == reference['root'], 'root'
        if flags & 1:
            info = archive.getinfo('StoreContent/persistentStore')
            assert (reference['compressedSize'], reference['crc32']) == (info.compress_size, info.CRC)
            with open(path, 'rb') as f:
                f.seek(info.header_offset)
                header = f.read(30)
                f.seek(info.header_offset + 30 + sum(struct.unpack_from('<HH', header, 26)))
                raw = f.read(info.compress_size)
            offsets = [struct.unpack_from('<Q', records, i * 48 + 32)[0] for i in range(count)] + [len(raw)]
            for i in range(count):
                segment = data[i * interval:(i + 1) * interval]
                assert struct.unpack_from('<I', records, i * 48 + 40)[0] == zlib.crc32(segment), 'CRC-32 %d' % i
                assert zlib.decompressobj(-15).decompress(raw[offsets[i]:offsets[i + 1]]) == segment, 'restart %d' % i
        else:
            assert all(records[i * 48 + 32:i * 48 + 48] == bytes(16) for i in range(count))
        print(3, 'restarts' if flags & 1 else 'none', count)
        """

    /// A store of about 1.5 MiB and its bundle, `Doc.mdz`, written by ``BundleWriter`` as version 3.
    private static func makeBundle(in folder: FilePath) throws -> (store: FilePath, bundle: FilePath) {
        let store = try Fixtures.makeStore(at: folder.appending("store.sqlite"), rows: 10_000, blobSize: 100)
        var writing = WritingOptions()
        writing.formatVersion = 3
        let bundle = folder.appending("Doc.mdz")
        try BundleWriter.write(BundleContent(store: store), metadata: DocumentMetadata(), to: bundle, options: writing)
        return (store, bundle)
    }

    private static func options(_ folder: FilePath, version: Int = 3) -> Document.OpenOptions {
        var options = appOptions(folder)
        options.saving.formatVersion = version
        return options
    }

    @Test("a bundle written as version 3 holds what python finds true of its index, and reads row for row in place",
          arguments: [(2, 2_500_000, 2), (2, 2_500_000, 0), (6, 3_000_000, 2), (0, 1_500_000, 2), (2, 60_000, 2),
                      (2, 13_000_000, 2)])
    func written(level: Int, bytes: Int, threads: Int) async throws {
        try await withTemporaryDirectory { folder in
            let store = try Fixtures.makeStore(at: folder.appending("store.sqlite"), rows: max(20, bytes / 300),
                                               blobSize: 100)
            var writing = WritingOptions(compression: level == 0 ? .store : .deflate(level: level))
            writing.compressionThreads = threads
            writing.formatVersion = 3
            let bundle = folder.appending("Doc.mdz")
            let metadata = try BundleWriter.write(BundleContent(store: store), metadata: DocumentMetadata(),
                                                  to: bundle, options: writing)
            #expect(metadata.formatVersion == 3 && metadata.store.index != nil)
            let size = try #require(try FileManager.default.attributesOfItem(atPath: store.string)[.size] as? Int)
            let expectsRestarts = level > 0 && size >= 1 << 20
            let records = size < 1 << 20 ? 1 : (size + (128 << 10) - 1) / (128 << 10)
            let printed = try Python.run(Self.independentCheck, [bundle.string])
            #expect(printed == "3 \(expectsRestarts ? "restarts" : "none") \(records)\n", "\(printed)")
            let reader = try BundleReader(at: bundle)
            _ = try reader.verify(full: true, workingDirectory: folder)
            // > The reader keeps the index's records as bytes and numbers, the writer spelled them: the same values
            // > either way, spelled alike, and encoded alike.
            let read = reader.metadata.store, written = metadata.store
            #expect(read.segments == written.segments && read.deflateRestarts == written.deflateRestarts)
            #expect(read.segments?.sha256 == written.segments?.sha256 && read.segments?.count == records)
            #expect(read.deflateRestarts?.crc32s == written.deflateRestarts?.crc32s)
            #expect(read.deflateRestarts?.compressedCRC32Cs == written.deflateRestarts?.compressedCRC32Cs)
            #expect((read.deflateRestarts?.crc32s?.utf8.count ?? 0) == (expectsRestarts ? records * 8 : 0))
            let encoded = try JSONEncoder().encode(read)
            #expect(try JSONDecoder().decode(DocumentMetadata.Store.self, from: encoded) == read)

            let source = try DatabaseQueue(path: store.string)
            let expected = try await source.read { db in try StoreContent(db) }
            try source.close()
            let inPlace = try BundleStore(at: bundle)
            if size >= 1 << 20 { #expect(inPlace.access == .segments, "\(inPlace.reason ?? "")") }
            #expect(try inPlace.read { db in try StoreContent(db) } == expected)
            inPlace.close()
        }
    }

    /// Where each case's bundle comes from: a version 1 fixture, or a version 2 document written here.
    enum Source: String, CaseIterable, CustomTestStringConvertible {
        case version1Small = "small.mdz", version1Large = "large.mdz", version1Stored = "stored.mdz"
        case version2 = "version 2"
        var testDescription: String { rawValue }
    }

    @Test("each earlier version's bundle is saved forward as version 3 when the app asks, row for row; the next save reuses segments",
          arguments: Source.allCases)
    func savedForward(from source: Source) async throws {
        try await withTemporaryDirectory { folder in
            let bundle = folder.appending("Notes.mdz")
            if source == .version2 {
                let document = try await Document.open(at: bundle, options: Self.options(folder, version: 2))
                try await document.writer.write { db in
                    try db.execute(sql: "CREATE TABLE note(id INTEGER PRIMARY KEY, title TEXT, body TEXT)")
                    for id in 1...3_000 {
                        try db.execute(sql: "INSERT INTO note VALUES (?, ?, ?)",
                                       arguments: [id, "note \(id)", String(repeating: "body \(id) ", count: 80)])
                    }
                }
                try await document.close()
            } else {
                try FileManager.default.copyItem(atPath: Self.formatOne.appending(source.rawValue).string,
                                                 toPath: bundle.string)
            }
            let old = try BundleReader(at: bundle)
            #expect(old.metadata.formatVersion == (source == .version2 ? 2 : 1))
            let model = folder.appending("model.sqlite")
            _ = try old.extractStore(to: model)
            let queue = try DatabaseQueue(path: model.string)
            try await queue.write { db in try db.execute(sql: "UPDATE note SET title = 'changed' WHERE id = 7") }
            let expected = try await queue.read { db in try StoreContent(db) }
            try await queue.write { db in try db.execute(sql: "UPDATE note SET title = 'again' WHERE id = 8") }
            let expectedAfterSecond = try await queue.read { db in try StoreContent(db) }
            try queue.close()

            let document = try await Document.open(at: bundle, options: Self.options(folder))
            try await document.writer.write { db in try db.execute(sql: "UPDATE note SET title = 'changed' WHERE id = 7") }
            try await document.save()
            let first = try #require(document.lastSave)
            let saved = try BundleReader(at: bundle)
            #expect(saved.metadata.formatVersion == 3 && saved.metadata.store.index != nil)
            #expect(saved.metadata.documentID == old.metadata.documentID)
            _ = try saved.verify(full: true, workingDirectory: folder)
            let printed = try Python.run(Self.independentCheck, [bundle.string])
            #expect(printed.hasPrefix("3 "), "\(printed)")
            #expect(try await bundleContent(bundle, folder: folder) == expected)

            try await document.writer.write { db in try db.execute(sql: "UPDATE note SET title = 'again' WHERE id = 8") }
            try await document.save()
            let second = try #require(document.lastSave)
            try await document.close()
            #expect(try await bundleContent(bundle, folder: folder) == expectedAfterSecond)
            #expect(try BundleReader(at: bundle).metadata.formatVersion == 3)
            let unzip = try execute("unzip", ["-tq", bundle.string])
            #expect(unzip.status == 0, "\(unzip.stdout)\(unzip.stderr)")
            if source == .version2 || source == .version1Large {
                // > Version 2 records what a save reuses (CRC-32s, CRC-32Cs), at the intervals version 3 keeps for
                // > a store this size: its first save forward is incremental already; version 1's is whole.
                #expect(first.mode == (source == .version2 ? .incremental : .full), "\(first)")
                #expect(second.mode == .incremental && second.reusedSegments > 0, "\(second)")
            }
        }
    }

    @Test("a damaged segment of a version 3 store read in place ends the read with an error naming it, never a wrong row")
    func damagedSegment() async throws {
        try await withTemporaryDirectory { folder in
            let (_, bundle) = try Self.makeBundle(in: folder)
            try flipStoreByte(in: bundle)

            let inPlace = try BundleStore(at: bundle)
            #expect(inPlace.access == .segments, "\(inPlace.reason ?? "")")
            let error = #expect(throws: (any Error).self) {
                _ = try inPlace.read { db in try Row.fetchAll(db, sql: "SELECT * FROM note ORDER BY rowid") }
            }
            inPlace.close()
            #expect("\(String(describing: error))".contains("segment"), "\(String(describing: error))")
        }
    }

    @Test("a version 3 bundle repacked by Info-ZIP opens (its restart points stale), verifies and reads row for row")
    func repacked() async throws {
        try await withTemporaryDirectory { folder in
            let (store, bundle) = try Self.makeBundle(in: folder)
            let unpacked = folder.appending("unpacked")
            #expect(try execute("unzip", ["-q", bundle.string, "-d", unpacked.string]).status == 0)
            let repacked = folder.appending("Repacked.mdz")
            #expect(try execute("zip", ["-q", "-X", "-0", repacked.string, "mimetype"], in: unpacked).status == 0)
            #expect(try execute("zip", ["-q", "-X", "-r", "-9", repacked.string, ".", "-x", "mimetype"],
                                in: unpacked).status == 0)
            let reader = try BundleReader(at: repacked)
            #expect(reader.metadata.formatVersion == 3)
            #expect(reader.notices.contains { $0.contains("restart index is stale") }, "\(reader.notices)")
            _ = try reader.verify(full: true, workingDirectory: folder)
            let source = try DatabaseQueue(path: store.string)
            let expected = try await source.read { db in try StoreContent(db) }
            try source.close()
            let inPlace = try BundleStore(at: repacked)
            #expect(try inPlace.read { db in try StoreContent(db) } == expected)
            inPlace.close()
        }
    }

    @Test("a format version this library does not write is refused before anything is written", arguments: [0, 1, 4])
    func unwritableVersion(_ version: Int) async throws {
        try await withTemporaryDirectory { folder in
            let store = try Fixtures.makeStore(at: folder.appending("store.sqlite"), rows: 20)
            var writing = WritingOptions()
            writing.formatVersion = version
            let bundle = folder.appending("Doc.mdz")
            let error = #expect(throws: DocumentError.self) {
                try BundleWriter.write(BundleContent(store: store), metadata: DocumentMetadata(), to: bundle,
                                       options: writing)
            }
            #expect(error?.code == .invalidArgument && error?.reason.contains("formatVersion") == true)
            #expect(!FileManager.default.fileExists(atPath: bundle.string))
        }
    }
}
