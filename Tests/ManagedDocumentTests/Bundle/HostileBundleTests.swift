import Foundation
import SystemPackage
import Testing
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

    // MARK: Controls: the tools that damage bundles do not damage them by themselves

    @Test("a good bundle taken apart and put back together unchanged still opens, extracts and verifies")
    func surgeryAloneIsHarmless() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            let original = try Fixtures.bytes(of: bundle)
            try ZipSurgery.edit(bundle) { _ in }
            #expect(try Fixtures.bytes(of: bundle) == original)
            let reader = try BundleReader(at: bundle)
            try reader.extract(into: directory.appending("out"))
            _ = try reader.verify(full: true, workingDirectory: directory)
        }
    }

    @Test("a bundle written from untouched parts opens, extracts and verifies", arguments: [true, false])
    func partsAloneAreGood(compressed: Bool) async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.add(Self.readme, Array("hello".utf8))
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts, compressed: compressed)
            let reader = try BundleReader(at: bundle)
            #expect(reader.entries.map(\.name) == [BundleLayout.mimetype, BundleLayout.store, Self.readme,
                                                   BundleLayout.metadata])
            let extracted = try reader.extract(into: directory.appending("out"))
            #expect(try Fixtures.bytes(of: extracted.store) == parts.store)
            _ = try reader.verify(full: true, workingDirectory: directory)
        }
    }

    // MARK: Entry names

    @Test("an entry name with a '..' component is path traversal", arguments: [
        "AdditionalContent/../../evil", "../x", "AdditionalContent/images/../../../x", "AdditionalContent/..",
    ])
    func dotDotName(name: String) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.bundle(renamingReadmeTo: Array(name.utf8), in: directory)
            try expectRefusal(bundle, in: directory, code: .pathTraversal, entry: name)
        }
    }

    @Test("an absolute entry name is path traversal", arguments: ["/etc/passwd", "/AdditionalContent/x", "//server/x"])
    func absoluteName(name: String) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.bundle(renamingReadmeTo: Array(name.utf8), in: directory)
            try expectRefusal(bundle, in: directory, code: .pathTraversal, entry: name)
        }
    }

    @Test("an entry name starting with a drive letter is path traversal", arguments: ["C:/evil", "c:evil", "Z:"])
    func driveLetterName(name: String) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.bundle(renamingReadmeTo: Array(name.utf8), in: directory)
            try expectRefusal(bundle, in: directory, code: .pathTraversal, entry: name)
        }
    }

    @Test("an entry name with a backslash is invalid", arguments: [
        #"AdditionalContent\evil"#, #"AdditionalContent/..\..\evil"#, #"\\server\share"#,
    ])
    func backslashName(name: String) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.bundle(renamingReadmeTo: Array(name.utf8), in: directory)
            try expectRefusal(bundle, in: directory, code: .invalidEntryName, entry: name)
        }
    }

    @Test("an entry name with a control character is invalid", arguments: [
        "AdditionalContent/a\u{0}b", "AdditionalContent/a\nb", "AdditionalContent/a\u{1B}[2Jb",
        "AdditionalContent/\u{7F}",
    ])
    func controlCharacterName(name: String) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.bundle(renamingReadmeTo: Array(name.utf8), in: directory)
            try expectRefusal(bundle, in: directory, code: .invalidEntryName, entry: name)
            // The printed line shows the whole name, its control characters escaped (not cut at a NUL).
            let error = #expect(throws: DocumentError.self) { _ = try BundleReader(at: bundle) }
            let line = error?.description ?? ""
            #expect(!line.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }, "\(line.debugDescription)")
            #expect(line.contains("AdditionalContent/") && line.contains("\\u{"), "\(line)")
        }
    }

    @Test("an entry name that is not UTF-8 is invalid", arguments: [
        Array("AdditionalContent/".utf8) + [0xFF, 0x41], Array("AdditionalContent/".utf8) + [0xC0, 0xAF, 0x65],
        Array("AdditionalContent/".utf8) + [0xED, 0xA0, 0x80],
    ])
    func invalidUTF8Name(raw: [UInt8]) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.bundle(renamingReadmeTo: raw, in: directory)
            try expectRefusal(bundle, in: directory, code: .invalidEntryName,
                              entry: String(decoding: raw, as: UTF8.self))
        }
    }

    @Test("an empty or '.' component, or a ':' in an entry name, is invalid", arguments: [
        "AdditionalContent//x", "AdditionalContent/./x", "AdditionalContent/a:b",
    ])
    func emptyOrDotComponentName(name: String) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.bundle(renamingReadmeTo: Array(name.utf8), in: directory)
            try expectRefusal(bundle, in: directory, code: .invalidEntryName, entry: name)
        }
    }

    @Test("an entry name longer than the limit is refused before it is used")
    func tooLongName() async throws {
        try await withTemporaryDirectory { directory in
            let name = "AdditionalContent/" + String(repeating: "a", count: 1_100)
            let bundle = try Self.bundle(renamingReadmeTo: Array(name.utf8), in: directory)
            // The error shows the name's first 200 bytes.
            try expectRefusal(bundle, in: directory, code: .limitExceeded, entry: String(name.prefix(200)))
        }
    }

    @Test("an entry name outside the format's layout is not allowed", arguments: [
        "Extra/file", "foo", "StoreContent/persistentStore-wal", "StoreContent/other", "Extra/",
    ])
    func entryNotAllowed(name: String) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.bundle(renamingReadmeTo: Array(name.utf8), in: directory)
            try expectRefusal(bundle, in: directory, code: .entryNotAllowed, entry: name)
        }
    }

    @Test("two entries with the same name are refused")
    func duplicateNames() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.bundle(renamingReadmeTo: Array(Self.picture.utf8), in: directory)
            try expectRefusal(bundle, in: directory, code: .duplicateEntry, entry: Self.picture)
        }
    }

    @Test("two names equal under Unicode canonical equivalence (NFC and NFD) are duplicates")
    func canonicallyEquivalentNames() async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.add("AdditionalContent/caf\u{E9}.txt", Array("composed".utf8))
            parts.add("AdditionalContent/cafe\u{301}.txt", Array("decomposed".utf8))
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            // On a normalizing file system (APFS, HFS+) the two would be one file.
            try expectRefusal(bundle, in: directory, codes: [.duplicateEntry],
                              entries: ["AdditionalContent/caf\u{E9}.txt", "AdditionalContent/cafe\u{301}.txt"])
        }
    }

    // MARK: Entry kinds, flags and methods

    @Test("a symbolic-link entry is refused")
    func symlinkEntry() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try ZipSurgery.edit(bundle) { $0.modify(Self.readme) { $0.setUnixMode(0o120777) } }
            try expectRefusal(bundle, in: directory, code: .nonRegularEntry, entry: Self.readme)
        }
    }

    @Test("a device, FIFO or socket entry is refused", arguments: [
        UInt32(0o020644), 0o060644, 0o010644, 0o140644,
    ])
    func deviceEntry(mode: UInt32) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try ZipSurgery.edit(bundle) { $0.modify(Self.readme) { $0.setUnixMode(mode) } }
            try expectRefusal(bundle, in: directory, code: .nonRegularEntry, entry: Self.readme)
        }
    }

    @Test("a file entry marked as a folder by DOS attributes is refused")
    func dosFolderAttribute() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try ZipSurgery.edit(bundle) {
                $0.modify(Self.readme) {
                    $0.record.versionMadeBy = 0x0014  // MS-DOS
                    $0.record.externalAttributes = 0x10
                }
            }
            try expectRefusal(bundle, in: directory, code: .nonRegularEntry, entry: Self.readme)
        }
    }

    /// Where an encryption flag is set.
    enum EncryptionMark: String, Sendable, CaseIterable {
        case directoryTraditional, directoryStrong, localOnly
    }

    @Test("an entry flagged as encrypted is refused", arguments: EncryptionMark.allCases)
    func encryptedEntry(mark: EncryptionMark) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try ZipSurgery.edit(bundle) {
                $0.modify(BundleLayout.store) {
                    switch mark {
                    case .directoryTraditional:
                        $0.record.flags |= 0x0001
                        $0.localFlags |= 0x0001
                    case .directoryStrong:
                        $0.record.flags |= 0x0041
                        $0.localFlags |= 0x0041
                    case .localOnly:
                        $0.localFlags |= 0x0001
                    }
                }
            }
            try expectRefusal(bundle, in: directory, code: .encryptedEntry, entry: BundleLayout.store)
        }
    }

    @Test("an entry compressed with another method than stored or deflate is refused", arguments: [
        UInt16(12), 14, 9, 93, 95, 99,
    ])
    func unsupportedCompression(method: UInt16) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try ZipSurgery.edit(bundle) {
                $0.modify(BundleLayout.store) {
                    $0.record.method = method
                    $0.localMethod = method
                }
            }
            try expectRefusal(bundle, in: directory, code: .unsupportedCompression, entry: BundleLayout.store)
        }
    }

    // MARK: Required entries and the mimetype entry

    @Test("a bundle without DocumentMetadata.json is refused")
    func missingMetadata() async throws {
        try await withTemporaryDirectory { directory in
            let parts = try ZipSurgery.makeParts(in: directory)
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeArchive(at: bundle, entries: [.init(BundleLayout.store, parts.store)])
            try expectRefusal(bundle, in: directory, code: .missingEntry, entry: BundleLayout.metadata)
        }
    }

    @Test("a bundle without a store is refused")
    func missingStore() async throws {
        try await withTemporaryDirectory { directory in
            let parts = try ZipSurgery.makeParts(in: directory)
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeArchive(at: bundle, entries: [
                .init("AdditionalContent/readme.txt", Array("hello".utf8)),
                .init(BundleLayout.metadata, try parts.metadataJSON()),
            ])
            try expectRefusal(bundle, in: directory, code: .missingEntry, entry: BundleLayout.store)
        }
    }

    @Test("a mimetype entry that is not the first entry is read, with a notice (another tool's repack)")
    func mimetypeNotFirst() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try ZipSurgery.edit(bundle) { archive in
                let mimetype = archive.entries.removeFirst()
                archive.entries.insert(mimetype, at: 1)
            }
            try expectReadWithNotice(bundle, in: directory, saying: "is not the first entry")
        }
    }

    @Test("a compressed mimetype entry is read, with a notice")
    func mimetypeCompressed() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try ZipSurgery.edit(bundle) {
                $0.modify(BundleLayout.mimetype) { entry in
                    entry.payload = ZipSurgery.deflateStoredBlock(entry.payload)
                    entry.localMethod = 8
                    entry.localCompressedSize = UInt32(entry.payload.count)
                    entry.record.method = 8
                    entry.record.versionNeeded = 20
                    entry.record.compressedSize = UInt64(entry.payload.count)
                }
            }
            try expectReadWithNotice(bundle, in: directory, saying: "is compressed")
        }
    }

    @Test("a mimetype entry with an extra field is read, with a notice")
    func mimetypeExtraField() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try ZipSurgery.edit(bundle) {
                $0.modify(BundleLayout.mimetype) { $0.localExtra = [0xFE, 0xCA, 0x02, 0x00, 0x00, 0x00] }
            }
            try expectReadWithNotice(bundle, in: directory, saying: "has an extra field")
        }
    }

    @Test("a mimetype entry with a data descriptor is read, with a notice")
    func mimetypeDataDescriptor() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try ZipSurgery.edit(bundle) {
                $0.modify(BundleLayout.mimetype) { entry in
                    entry.localFlags |= 0x0008
                    entry.record.flags |= 0x0008
                    var descriptor: [UInt8] = []
                    descriptor.appendLE(UInt32(0x0807_4b50))
                    descriptor.appendLE(entry.record.crc32)
                    descriptor.appendLE(UInt32(entry.payload.count))
                    descriptor.appendLE(UInt32(entry.payload.count))
                    entry.payload += descriptor
                }
            }
            try expectReadWithNotice(bundle, in: directory, saying: "has a data descriptor")
        }
    }

    @Test("bytes prefixed to a bundle (a stub, offsets adjusted by zip -A) are refused")
    func prefixedStub() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try Fixtures.write(Array("#!/bin/sh\necho not a bundle\nexit 0\n".utf8) + (try Fixtures.bytes(of: bundle)), to: bundle)
            let adjusted = try run("zip", ["-A", "-q", bundle.string])
            #expect(adjusted.status == 0, "\(adjusted.output)")
            try expectRefusal(bundle, in: directory, code: .mimetypeNotFirst, entry: BundleLayout.mimetype)
        }
    }

    /// A bundle whose `mimetype` layout another tool changed: read, verified and extracted, with a notice.
    private func expectReadWithNotice(_ bundle: FilePath, in directory: FilePath, saying text: String) throws {
        let reader = try BundleReader(at: bundle)
        #expect(!reader.isMediaTypeSniffable)
        #expect(reader.notices.contains { $0.contains(text) && $0.contains("byte 38") }, "\(reader.notices)")
        #expect(reader.mediaType == BundleLayout.defaultMediaType)
        _ = try reader.verify(full: true, workingDirectory: directory)
        _ = try reader.extract(into: directory.appending("read-\(UUID().uuidString)"))
    }

    @Test("a mimetype entry whose content is not a media type is refused", arguments: [
        "hello world", "text/plain\n", "application", "a/b/c", "/x", "x/", "ünïcødé/x", "",
        "application/" + String(repeating: "x", count: 300),
    ])
    func mimetypeNotAMediaType(content: String) async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.metadata.mediaType = content
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts, mediaType: content)
            try expectRefusal(bundle, in: directory, code: .invalidMimetype, entry: BundleLayout.mimetype)
        }
    }

    @Test("a mimetype entry whose CRC-32 does not match its content is refused")
    func mimetypeBadCRC() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try ZipSurgery.edit(bundle) {
                $0.modify(BundleLayout.mimetype) { entry in
                    entry.record.crc32 ^= 1
                    entry.localCRC32 ^= 1
                }
            }
            try expectRefusal(bundle, in: directory, code: .checksumMismatch, entry: BundleLayout.mimetype)
        }
    }

    @Test("a mimetype entry that differs from the metadata's mediaType is refused")
    func mediaTypeMismatch() async throws {
        try await withTemporaryDirectory { directory in
            let parts = try ZipSurgery.makeParts(in: directory)
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts, mediaType: "application/x-other+zip")
            try expectRefusal(bundle, in: directory, code: .mediaTypeMismatch, entry: BundleLayout.mimetype)
        }
    }

    // MARK: Checksums and the store

    @Test("a flipped byte in a stored store entry fails its CRC-32", arguments: [RefusalStep.extract, .verify])
    func storeCRCMismatch(step: RefusalStep) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory, options: WritingOptions(compression: .store))
            try ZipSurgery.edit(bundle) {
                $0.modify(BundleLayout.store) { entry in
                    #expect(entry.record.method == 0)
                    entry.payload[Int(entry.record.uncompressedSize) / 2] ^= 0x5A
                }
            }
            #expect(throws: Never.self) { try BundleReader(at: bundle) }
            try expectRefusal(bundle, in: directory, at: step, code: .checksumMismatch, entry: BundleLayout.store)
        }
    }

    /// Ways a deflated entry's stream can disagree with the entry that holds it.
    enum BadStream: String, CaseIterable, CustomTestStringConvertible {
        /// A whole stream, then bytes nobody would read.
        case bytesAfterTheStream
        /// A stored block that is not marked final: the stream never ends.
        case noFinalBlock
        /// A stored block longer than the bytes that follow.
        case cutShort
        /// Block type 3, which deflate reserves.
        case reservedBlockType
        /// A whole stream whose CRC-32 in the directory and local header is wrong.
        case wrongCRC
        var testDescription: String { rawValue }
    }

    @Test("a deflated entry whose stream does not match the entry is refused while it is read",
          arguments: BadStream.allCases)
    func deflatedStreamMismatch(_ bad: BadStream) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            let content = Array("hello".utf8)
            var crc = CRC32()
            crc.update(content)
            var stream = ZipSurgery.deflateStoredBlock(content)
            var entryCRC = crc.value
            switch bad {
            case .bytesAfterTheStream: stream += [0x03, 0x00, 0x2A]
            case .noFinalBlock: stream[0] = 0x00
            case .cutShort: stream.removeLast(2)
            case .reservedBlockType: stream = [0x07] + Array(stream.dropFirst())
            case .wrongCRC: entryCRC ^= 0x0101_0101
            }
            try ZipSurgery.edit(bundle) {
                $0.modify(Self.readme) { entry in
                    // > Sizes and CRC-32 in the local header, no data descriptor: the payload is the stream alone.
                    entry.localFlags &= ~0x0008
                    entry.record.flags &= ~0x0008
                    entry.localMethod = 8
                    entry.record.method = 8
                    entry.localCRC32 = entryCRC
                    entry.record.crc32 = entryCRC
                    entry.localCompressedSize = UInt32(stream.count)
                    entry.record.compressedSize = UInt64(stream.count)
                    entry.localUncompressedSize = UInt32(content.count)
                    entry.record.uncompressedSize = UInt64(content.count)
                    entry.payload = stream
                }
            }
            #expect(throws: Never.self) { try BundleReader(at: bundle) }
            let code: DocumentError.Code = bad == .wrongCRC ? .checksumMismatch : .corruptArchive
            try expectRefusal(bundle, in: directory, at: .extract, code: code, entry: Self.readme)
        }
    }

    @Test("a deflated entry written as one plain stream by another tool reads back byte for byte")
    func plainStreamFromElsewhere() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            let content = Array("hello".utf8)
            var crc = CRC32()
            crc.update(content)
            // > A non-final empty stored block, then the final one: two blocks, one stream.
            let stream: [UInt8] = [0x00, 0x00, 0x00, 0xFF, 0xFF] + ZipSurgery.deflateStoredBlock(content)
            try ZipSurgery.edit(bundle) {
                $0.modify(Self.readme) { entry in
                    entry.localFlags &= ~0x0008
                    entry.record.flags &= ~0x0008
                    entry.localCRC32 = crc.value
                    entry.record.crc32 = crc.value
                    entry.localCompressedSize = UInt32(stream.count)
                    entry.record.compressedSize = UInt64(stream.count)
                    entry.payload = stream
                }
            }
            let extracted = try BundleReader(at: bundle).extract(into: directory.appending("out"))
            #expect(try Fixtures.bytes(of: extracted.additionalContent!.appending("readme.txt")) == content)
        }
    }

    @Test("a store whose SHA-256 differs from the metadata's is refused", arguments: [RefusalStep.extract, .verify])
    func storeSHA256Mismatch(step: RefusalStep) async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.metadata.store.sha256 = ZipSurgery.sha256(Array("something else".utf8))
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, at: step, code: .checksumMismatch, entry: BundleLayout.store)
        }
    }

    @Test("an additional file whose SHA-256 differs from the metadata's is refused")
    func entrySHA256Mismatch() async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.add(Self.readme, Array("hello".utf8))
            parts.metadata.entries[0].sha256 = ZipSurgery.sha256(Array("jello".utf8))
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, at: .extract, code: .checksumMismatch, entry: Self.readme)
        }
    }

    @Test("a store that is not a SQLite database is refused", arguments: [RefusalStep.extract, .verify])
    func storeNotSQLite(step: RefusalStep) async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.replaceStore(Array(String(repeating: "this is not a database. ", count: 400).utf8))
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, at: step, code: .notSQLite, entry: BundleLayout.store)
        }
    }

    @Test("a store with a good header and garbage pages fails SQLite's quick_check")
    func storeCorrupt() async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory, rows: 200)
            var store = parts.store
            let pageSize = parts.metadata.store.pageSize
            #expect(store.count >= 4 * pageSize)
            var generator = SeededGenerator(seed: 42)
            for index in pageSize..<store.count { store[index] = UInt8.random(in: 0...255, using: &generator) }
            parts.replaceStore(store)
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, at: .verify, code: .storeCorrupt, entry: BundleLayout.store)
        }
    }

    @Test("a store in WAL mode at rest is refused")
    func storeInWALMode() async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            var store = parts.store
            store[18] = 2
            store[19] = 2
            parts.replaceStore(store)
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, at: .verify, code: .storeInWALMode, entry: BundleLayout.store)
        }
    }

    // MARK: Metadata

    @Test("metadata that is not JSON is invalid", arguments: [
        "{ \"format\": ", "not json at all", "[1, 2, 3]", "null", "", "{\"format\": \"managed-document\", }",
    ])
    func malformedMetadata(text: String) async throws {
        try await withTemporaryDirectory { directory in
            let parts = try ZipSurgery.makeParts(in: directory)
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts, metadata: Array(text.utf8))
            try expectRefusal(bundle, in: directory, code: .invalidMetadata, entry: BundleLayout.metadata)
        }
    }

    @Test("metadata missing a required key is invalid", arguments: [
        "format", "formatVersion", "documentID", "createdAt", "modifiedAt", "generator", "mediaType", "store",
        "model", "entries", "store.sha256", "store.size", "store.schemaFingerprint",
    ])
    func metadataMissingKey(key: String) async throws {
        try await withTemporaryDirectory { directory in
            let parts = try ZipSurgery.makeParts(in: directory)
            let json = try parts.metadataJSON { object in
                let path = key.split(separator: ".").map(String.init)
                if path.count == 1 {
                    object.removeValue(forKey: key)
                } else if var inner = object[path[0]] as? [String: Any] {
                    inner.removeValue(forKey: path[1])
                    object[path[0]] = inner
                }
            }
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts, metadata: json)
            try expectRefusal(bundle, in: directory, code: .invalidMetadata, entry: BundleLayout.metadata)
        }
    }

    @Test("metadata with a value of the wrong type is invalid", arguments: [
        "formatVersion=\"1\"", "formatVersion=1.5", "documentID=\"not-a-uuid\"", "createdAt=\"yesterday\"",
        "store=[]", "entries={}",
    ])
    func metadataWrongType(assignment: String) async throws {
        try await withTemporaryDirectory { directory in
            let parts = try ZipSurgery.makeParts(in: directory)
            let split = assignment.split(separator: "=", maxSplits: 1).map(String.init)
            let value = try JSONSerialization.jsonObject(with: Data(split[1].utf8), options: [.fragmentsAllowed])
            let json = try parts.metadataJSON { $0[split[0]] = value }
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts, metadata: json)
            try expectRefusal(bundle, in: directory, code: .invalidMetadata, entry: BundleLayout.metadata)
        }
    }

    @Test("metadata whose format is not managed-document is invalid", arguments: [
        "other-format", "", "Managed-Document", "managed-document ",
    ])
    func metadataWrongFormat(format: String) async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.metadata.format = format
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, code: .invalidMetadata, entry: BundleLayout.metadata)
        }
    }

    @Test("metadata from a newer format version is refused as newer", arguments: [2, 99, Int(Int32.max)])
    func newerFormat(version: Int) async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.metadata.formatVersion = version
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            let error = try expectRefusal(bundle, in: directory, code: .newerFormat, entry: BundleLayout.metadata)
            #expect(error?.reason.contains("\(version)") == true)
        }
    }

    @Test("metadata with a format version below 1 is invalid", arguments: [0, -1])
    func formatVersionBelowOne(version: Int) async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.metadata.formatVersion = version
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, code: .invalidMetadata, entry: BundleLayout.metadata)
        }
    }

    @Test("metadata lying about the store's size is refused", arguments: [Int64(1), -1, 1 << 40])
    func metadataLiesAboutStoreSize(delta: Int64) async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.metadata.store.size += delta
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, code: .metadataMismatch, entry: BundleLayout.store)
        }
    }

    @Test("metadata naming another store entry is refused")
    func metadataNamesAnotherStore() async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.metadata.store.entry = "StoreContent/other"
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, code: .metadataMismatch, entry: BundleLayout.metadata)
        }
    }

    @Test("metadata whose store SHA-256 is not a SHA-256 is refused", arguments: [
        "", "abc", String(repeating: "A", count: 64), String(repeating: "g", count: 64),
    ])
    func metadataStoreHashNotHex(hash: String) async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.metadata.store.sha256 = hash
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, code: .metadataMismatch, entry: BundleLayout.metadata)
        }
    }

    @Test("metadata listing an entry the archive does not hold is refused")
    func metadataListsAbsentEntry() async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.metadata.entries = [DocumentMetadata.Entry(name: "AdditionalContent/ghost", size: 5,
                                                             sha256: ZipSurgery.sha256(Array("ghost".utf8)))]
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, code: .metadataMismatch, entry: BundleLayout.metadata)
        }
    }

    @Test("an entry the metadata does not list is refused")
    func metadataOmitsEntry() async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.add(Self.readme, Array("hello".utf8))
            parts.metadata.entries = []
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, code: .metadataMismatch, entry: Self.readme)
        }
    }

    @Test("metadata lying about an entry's size is refused")
    func metadataLiesAboutEntrySize() async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.add(Self.readme, Array("hello".utf8))
            parts.metadata.entries[0].size = 6
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, code: .metadataMismatch, entry: Self.readme)
        }
    }

    @Test("metadata lying about the store's page size is refused on verify")
    func metadataLiesAboutPageSize() async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.metadata.store.pageSize = parts.metadata.store.pageSize == 1024 ? 4096 : 1024
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, at: .verify, code: .metadataMismatch, entry: BundleLayout.store)
        }
    }

    @Test("metadata lying about the store's user_version is refused on verify")
    func metadataLiesAboutUserVersion() async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.metadata.store.userVersion += 1
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, at: .verify, code: .metadataMismatch, entry: BundleLayout.store)
        }
    }

    @Test("metadata lying about the store's schema fingerprint is refused on verify")
    func metadataLiesAboutSchema() async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.metadata.store.schemaFingerprint = ZipSurgery.sha256(Array("CREATE TABLE other(x)".utf8))
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, at: .verify, code: .metadataMismatch, entry: BundleLayout.store)
        }
    }

    // MARK: Archive structure

    @Test("two directory records pointing at the same local header are overlapping entries")
    func overlappingEntries() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            let copy = "AdditionalContent/overlap"
            try ZipSurgery.edit(bundle, editingDirectory: { records in
                var record = records.first { $0.name == Array(BundleLayout.store.utf8) }!
                record.name = Array(copy.utf8)
                records.append(record)
            }) { _ in }
            // Which of the two is named depends on the order of the sort; one of them must be.
            try expectRefusal(bundle, in: directory, codes: [.overlappingEntries],
                              entries: [BundleLayout.store, copy])
        }
    }

    @Test("a directory record pointing into another entry's data is an overlap")
    func recordPointsIntoData() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try ZipSurgery.edit(bundle, editingDirectory: { records in
                let store = records.first { $0.name == Array(BundleLayout.store.utf8) }!
                var record = store
                record.name = Array("AdditionalContent/inner".utf8)
                record.localHeaderOffset = store.localHeaderOffset + 100
                records.append(record)
            }) { _ in }
            try expectRefusal(bundle, in: directory, code: .overlappingEntries, entry: "AdditionalContent/inner")
        }
    }

    /// Where a directory record the end record does not count points.
    enum HiddenRecord: String, Sendable, CaseIterable {
        /// At a listed entry's local header, under another name (other readers list one more entry).
        case sharingALocalHeader
        /// At a local header and data of its own, after the listed entries.
        case withItsOwnData
    }

    @Test("a directory record hidden beyond the end record's entry count is refused", arguments: HiddenRecord.allCases)
    func hiddenDirectoryRecord(hidden: HiddenRecord) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            let name = "../../evil.txt"
            switch hidden {
            case .sharingALocalHeader:
                try ZipSurgery.edit(bundle, editingDirectory: { records in
                    var record = records.first { $0.name == Array(Self.readme.utf8) }!
                    record.name = Array(name.utf8)
                    records.append(record)
                }, hiddenRecords: 1) { _ in }
            case .withItsOwnData:
                try ZipSurgery.edit(bundle, hiddenRecords: 1) { archive in
                    var entry = archive.entries[archive.index(of: Self.readme)]
                    entry.rename(to: Array(name.utf8))
                    archive.entries.append(entry)
                }
            }
            // Python's zipfile and bsdtar list the hidden entry; the reader must not accept what it did not check.
            try expectRefusal(bundle, in: directory, at: .extract, codes: [.corruptArchive],
                              entries: [nil, name, Self.readme])
        }
    }

    @Test("a file entry below another file entry can never be extracted and is refused", arguments: [true, false])
    func fileBelowFile(fileFirst: Bool) async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            let inner = Self.readme + "/inner"
            if fileFirst { parts.add(Self.readme, Array("hello".utf8)) }
            parts.add(inner, Array("inner".utf8))
            if !fileFirst { parts.add(Self.readme, Array("hello".utf8)) }
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, at: .extract,
                              codes: [.duplicateEntry, .entryNotAllowed, .invalidEntryName, .corruptArchive],
                              entries: [inner, Self.readme])
        }
    }

    @Test("a regular-file entry whose name ends in '/' is refused")
    func fileNamedLikeAFolder() async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.add("AdditionalContent/folder/", [])
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, code: .nonRegularEntry, entry: "AdditionalContent/folder/")
        }
    }

    @Test("an entry whose data runs past the end of the file is a truncated archive")
    func dataRunsPastTheFile() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            let size = try Fixtures.bytes(of: bundle).count
            try ZipSurgery.edit(bundle) {
                $0.modify(BundleLayout.store) { $0.record.compressedSize = UInt64(size) * 4 }
            }
            try expectRefusal(bundle, in: directory, codes: [.truncatedArchive, .corruptArchive],
                              entry: BundleLayout.store)
        }
    }

    /// Where a copy was cut off.
    enum Cut: String, Sendable, CaseIterable {
        case oneByteShort, half, afterMimetype
    }

    @Test("a bundle cut short, its end records lost, is a truncated or corrupt archive", arguments: Cut.allCases)
    func cutShort(cut: Cut) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            let bytes = try Fixtures.bytes(of: bundle)
            let length = switch cut {
            case .oneByteShort: bytes.count - 1
            case .half: bytes.count / 2
            case .afterMimetype: BundleLayout.mediaTypeOffset + BundleLayout.defaultMediaType.utf8.count
            }
            try Fixtures.write(Array(bytes.prefix(length)), to: bundle)
            try expectRefusal(bundle, in: directory, codes: [.truncatedArchive, .corruptArchive], entry: nil)
        }
    }

    @Test("a directory record pointing where there is no local header is a corrupt archive")
    func recordPointsAtNoHeader() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try ZipSurgery.edit(bundle) {
                $0.modify(Self.readme) { $0.localHeader.writeLE(UInt32(0x1234_5678), at: 0) }
            }
            try expectRefusal(bundle, in: directory, code: .corruptArchive, entry: Self.readme)
        }
    }

    @Test("a local header whose name disagrees with the directory is a corrupt archive")
    func localNameDisagrees() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try ZipSurgery.edit(bundle) { $0.modify(Self.readme) { $0.localName = Array("../../../../tmp/evil".utf8) } }
            try expectRefusal(bundle, in: directory, code: .corruptArchive, entry: Self.readme)
        }
    }

    @Test("a local header whose sizes disagree with the directory is a corrupt archive")
    func localSizesDisagree() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try ZipSurgery.edit(bundle) {
                $0.modify(Self.readme) { entry in
                    #expect(entry.localUncompressedSize == 5)
                    entry.localUncompressedSize = 5_000
                }
            }
            try expectRefusal(bundle, in: directory, at: .extract, codes: [.corruptArchive, .sizeMismatch],
                              entry: Self.readme)
        }
    }

    @Test("a file that is not a zip archive is refused", arguments: ["empty", "text", "random", "pdf"])
    func notAZipArchive(kind: String) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = directory.appending("Notes.mdz")
            var generator = SeededGenerator(seed: 7)
            let bytes: [UInt8] = switch kind {
            case "empty": []
            case "text": Array("Dear diary, today I opened a bundle.\n".utf8)
            case "random": (0..<8_192).map { _ in UInt8.random(in: 0...255, using: &generator) }
            default: Array("%PDF-1.4\n%\u{E2}\u{E3}\n1 0 obj << /Type /Catalog >> endobj\ntrailer << >>\n%%EOF\n".utf8)
            }
            try Fixtures.write(bytes, to: bundle)
            try expectRefusal(bundle, in: directory, code: .notAZipArchive, entry: nil)
        }
    }

    @Test("a SQLite store passed as a bundle is not a document, and the error says how to convert it")
    func sqliteStoreAsBundle() async throws {
        try await withTemporaryDirectory { directory in
            let store = try Fixtures.makeStore(at: directory.appending("Notes.sqlite"), rows: 3)
            let error = try expectRefusal(store, in: directory, code: .notADocument, entry: nil)
            #expect(error?.reason.contains("LegacyConverter") == true, "\(String(describing: error))")
        }
    }

    @Test("a zip archive without a mimetype entry is not a document")
    func zipWithoutMimetype() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try ZipSurgery.edit(bundle) { $0.entries.removeFirst() }
            try expectRefusal(bundle, in: directory, code: .notADocument, entry: nil)
        }
    }

    // MARK: Limits and bombs

    @Test("a bundle with more entries than the limit is refused")
    func entryCountLimit() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            var limits = ReadingLimits()
            limits.maxEntryCount = 4
            try expectRefusal(bundle, in: directory, code: .limitExceeded, entry: nil, limits: limits)
        }
    }

    @Test("a bundle whose entries inflate beyond the total-size limit is refused")
    func totalSizeLimit() async throws {
        try await withTemporaryDirectory { directory in
            let parts = try ZipSurgery.makeParts(in: directory)
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            var limits = ReadingLimits()
            limits.maxTotalUncompressedSize = 4_096
            try expectRefusal(bundle, in: directory, code: .limitExceeded, entry: BundleLayout.store, limits: limits)
        }
    }

    @Test("an entry whose declared sizes exceed the compression-ratio limit is refused")
    func compressionRatioLimit() async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            let name = "AdditionalContent/zeros"
            parts.add(name, [UInt8](repeating: 0, count: 4 << 20))
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            var limits = ReadingLimits()
            limits.maxCompressionRatio = 100
            try expectRefusal(bundle, in: directory, code: .limitExceeded, entry: name, limits: limits)
        }
    }

    @Test("a declared size beyond the default ratio limit is refused before anything is inflated")
    func declaredRatioBomb() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try ZipSurgery.edit(bundle) {
                $0.modify(Self.picture) { $0.record.uncompressedSize = 32 << 30 }
            }
            try expectRefusal(bundle, in: directory, code: .limitExceeded, entry: Self.picture)
        }
    }

    @Test("an entry name longer than a small name limit is refused")
    func nameLengthLimit() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            var limits = ReadingLimits()
            limits.maxNameLength = 24
            try expectRefusal(bundle, in: directory, code: .limitExceeded, entry: BundleLayout.store, limits: limits)
        }
    }

    @Test("metadata larger than the metadata limit is refused")
    func metadataSizeLimit() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            var limits = ReadingLimits()
            limits.maxMetadataSize = 64
            try expectRefusal(bundle, in: directory, code: .limitExceeded, entry: BundleLayout.metadata,
                              limits: limits)
        }
    }

    @Test("a central directory larger than the directory limit is refused")
    func directorySizeLimit() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            var limits = ReadingLimits()
            limits.maxDirectorySize = 64
            try expectRefusal(bundle, in: directory, code: .limitExceeded, entry: nil, limits: limits)
        }
    }

    @Test("a metadata entry that inflates beyond its declared size is refused while it is read")
    func metadataBomb() async throws {
        try await withTemporaryDirectory { directory in
            let parts = try ZipSurgery.makeParts(in: directory)
            let bundle = directory.appending("Notes.mdz")
            var json = try parts.metadataJSON()
            json += [UInt8](repeating: 0x20, count: 20 << 20)  // trailing whitespace: still valid JSON
            try ZipSurgery.writeBundle(at: bundle, parts: parts, metadata: json)
            try ZipSurgery.edit(bundle) {
                $0.modify(BundleLayout.metadata) { entry in
                    entry.record.uncompressedSize = 4_096
                    entry.localUncompressedSize = entry.localUncompressedSize == 0 ? 0 : 4_096
                    let descriptor = entry.payload.count - 16
                    if descriptor >= 0, entry.payload.readLE32(at: descriptor) == 0x0807_4b50 {
                        entry.payload.writeLE(UInt32(4_096), at: descriptor + 12)
                    }
                }
            }
            try expectRefusal(bundle, in: directory, codes: [.sizeMismatch, .checksumMismatch],
                              entry: BundleLayout.metadata)
        }
    }

    @Test("a deflate bomb that inflates far beyond its declared size stops within a buffer of it")
    func deflateBomb() async throws {
        try await withTemporaryDirectory { directory in
            let declared = 1 << 20
            let name = "AdditionalContent/bomb"
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.metadata.entries = [DocumentMetadata.Entry(
                name: name, size: Int64(declared), sha256: ZipSurgery.sha256([UInt8](repeating: 0, count: declared)))]
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeArchive(at: bundle, entries: [
                .init(BundleLayout.store, parts.store),
                .init(name, zeros: 50 << 20),
                .init(BundleLayout.metadata, try parts.metadataJSON()),
            ])
            try ZipSurgery.edit(bundle) {
                $0.modify(name) { entry in
                    #expect(entry.record.method == 8)
                    #expect(entry.record.compressedSize < 1 << 20)
                    entry.record.uncompressedSize = UInt64(declared)
                    entry.localUncompressedSize = entry.localUncompressedSize == 0 ? 0 : UInt32(declared)
                    // The data descriptor lies too.
                    let descriptor = entry.payload.count - 16
                    if descriptor >= 0, entry.payload.readLE32(at: descriptor) == 0x0807_4b50 {
                        entry.payload.writeLE(UInt32(declared), at: descriptor + 12)
                    }
                }
            }
            let reader = try BundleReader(at: bundle)
            #expect(reader.entry(named: name)?.size == UInt64(declared))

            // What the streaming check leaves on disk when it stops (extract removes it afterwards).
            let out = directory.appending("out")
            try FileSystem.createDirectory(out)
            let partial = #expect(throws: DocumentError.self) { try reader.streamEntries(into: out) { _ in true } }
            #expect([.sizeMismatch, .checksumMismatch].contains(partial?.code), "\(String(describing: partial))")
            let written = (try FileSystem.status(out.appending(name)))?.size ?? 0
            #expect(written <= Int64(declared + (2 << 20)), "the bomb wrote \(written) bytes")
            try FileSystem.removeTree(out)

            try expectRefusal(bundle, in: directory, at: .extract, codes: [.sizeMismatch, .checksumMismatch],
                              entry: name)
            try expectRefusal(bundle, in: directory, at: .verify, codes: [.sizeMismatch, .checksumMismatch],
                              entry: name)
            let verifying = #expect(throws: DocumentError.self) { try reader.verifyEntries() }
            #expect([.sizeMismatch, .checksumMismatch].contains(verifying?.code))
        }
    }

    @Test("a valid store followed by 64 MiB of zeros, sizes and SHA-256 consistent, is refused before it is inflated")
    func paddedStore() async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.metadata.store.deflateRestarts = nil
            let declared = StoreInspector.declaredSize(header: Array(parts.store.prefix(100)))
            #expect(declared == UInt64(parts.store.count), "the fixture's header states its size")
            parts.replaceStore(parts.store + [UInt8](repeating: 0, count: 64 << 20))
            let bundle = directory.appending("Padded.mdz")
            try ZipSurgery.writeArchive(at: bundle, entries: [
                .init(BundleLayout.store, parts.store),
                .init(BundleLayout.metadata, try parts.metadataJSON()),
            ])
            #expect(try FileSystem.status(bundle)!.size < 1 << 20, "a small bundle")
            try expectRefusal(bundle, in: directory, at: .extract, codes: [.sizeMismatch], entry: BundleLayout.store)
            try expectRefusal(bundle, in: directory, at: .verify, codes: [.sizeMismatch], entry: BundleLayout.store)
            let reader = try BundleReader(at: bundle)
            let out = directory.appending("out")
            try FileSystem.createDirectory(out)
            _ = #expect(throws: DocumentError.self) { try reader.streamEntries(into: out) { _ in true } }
            let written = (try FileSystem.status(out.appending(BundleLayout.store)))?.size ?? 0
            #expect(written <= 1 << 20, "stopped after the header: \(written) bytes written")

            // A little junk after the last page (an honest file cut or grown by a crash) is still read.
            var honest = try ZipSurgery.makeParts(in: directory.appending("honest"))
            honest.metadata.store.deflateRestarts = nil
            honest.replaceStore(honest.store + [UInt8](repeating: 0, count: 4096))
            let tolerated = directory.appending("Honest.mdz")
            try ZipSurgery.writeArchive(at: tolerated, entries: [
                .init(BundleLayout.store, honest.store),
                .init(BundleLayout.metadata, try honest.metadataJSON()),
            ])
            try BundleReader(at: tolerated).verifyEntries()
        }
    }
}
