import Crypto
import SystemPackage

/// Reads one segment of a bundle's store (the bytes its digest covers) from the bundle, as ``SegmentPlan`` cuts
/// them: a stored store by offset, a deflated one by inflating only its restart segments; every segment is checked
/// against its SHA-256 before any of its bytes are handed out.
///
/// Reads the descriptor its ``BundleReader`` opened, for its whole life: a bundle replaced on disk meanwhile is not
/// seen. Keeps only that file, its path and the plan, not the reader (whose metadata may list 100,000 entries): a
/// connection's memory is its segment cache and the plan, whatever else the bundle holds. Holds the segment (at most
/// ``ReadingLimits/maxDigestSegmentSize``) and the compressed bytes of one restart segment at a time (at most
/// deflate's bound for ``ReadingLimits/maxRestartSegmentSize``) while it loads one.
@_spi(Core) public struct SegmentLoader: Sendable {
    /// The bundle file the reader checked.
    @_spi(Core) public let file: OpenFile
    /// The bundle's path, for errors.
    @_spi(Core) public let path: FilePath
    @_spi(Core) public let plan: SegmentPlan
    /// What the process's ``SegmentPool`` keeps this store's segments under: the file's identity when the reader
    /// opened it, and the plan's cut.
    @_spi(Core) public let key: SegmentPool.BundleKey

    @_spi(Core) public init(reader: BundleReader, plan: SegmentPlan) {
        file = reader.file
        path = reader.path
        self.plan = plan
        key = SegmentPool.BundleKey(reader.openedIdentity, plan: plan)
    }

    /// Segment `index`, checked against its digest.
    @_spi(Core) public func load(_ index: Int) throws -> [UInt8] {
        // > index < ⌈size ÷ interval⌉ (the digests' count, checked at open), so start < size: no overflow.
        let start = Int64(index) * plan.interval
        let length = Int(min(plan.interval, plan.size - start))
        let damaged = Damage(path: path, segment: plan.isWhole ? nil : index, start: start, length: length)
        var bytes: [UInt8]
        if plan.restarts != nil {
            bytes = [UInt8](repeating: 0, count: length)
            try inflate(index, into: &bytes, damaged)
        } else {
            bytes = try FileSystem.read(file.descriptor, at: Int64(plan.dataOffset) + start, count: length,
                                        path: path)
            guard bytes.count == length else { throw damaged("is cut short", code: .truncatedArchive) }
        }
        try check(bytes, index: index, damaged)
        if plan.isWhole {
            // > The whole entry is at hand: its CRC-32 must be the central directory's, as every zip tool checks.
            var crc = CRC32()
            crc.update(bytes)
            guard crc.value == plan.entryCRC else {
                throw damaged("does not match the zip entry's CRC-32 (the central directory records another); the bundle is damaged, restore it from a backup")
            }
        }
        return bytes
    }

    /// Checks segment `index`'s bytes against its digest, or a store served whole against its SHA-256 or each of
    /// its segment digests.
    private func check(_ bytes: [UInt8], index: Int, _ damaged: Damage) throws {
        let advice = "the bundle is damaged, restore it from a backup"
        switch plan.whole {
        case nil:
            guard SHA256.hash(data: bytes).hexString == plan.digests[index] else {
                throw damaged("does not match its SHA-256 in \(plan.names.digests); \(advice)")
            }
        case .sha256(let digest):
            guard SHA256.hash(data: bytes).hexString == digest else {
                throw damaged("does not match its SHA-256 in 'store.sha256' (the whole store); \(advice)")
            }
        case .segments(let segments):
            // > The digests' count and the interval were checked against the store's size when the bundle opened.
            for (segment, digest) in segments.digests.enumerated() {
                let range = segments.range(ofSegment: segment, size: plan.size)
                let piece = bytes[Int(range.lowerBound)..<Int(range.upperBound)]
                guard SHA256.hash(data: piece).hexString == digest else {
                    throw DocumentError(.checksumMismatch, path: path, entry: BundleLayout.store,
                                        reason: "segment \(segment) (bytes \(range.lowerBound)-\(range.upperBound - 1)) does not match its SHA-256 in \(plan.names.digests); \(advice); no byte of the store was used")
                }
            }
        }
    }

    /// The error for a segment that is not what its plan says.
    private struct Damage {
        @_spi(Core) public let path: FilePath
        @_spi(Core) public let segment: Int?
        @_spi(Core) public let start: Int64
        @_spi(Core) public let length: Int

        @_spi(Core)
        public func callAsFunction(_ reason: String, code: DocumentError.Code = .checksumMismatch) -> DocumentError {
            DocumentError(code, path: path, entry: BundleLayout.store,
                          reason: "\(segment.map { "segment \($0)" } ?? "the store") (bytes \(start)-\(start + Int64(length) - 1)) \(reason); no byte of it was used")
        }
    }

    /// Inflates the restart segments of segment `index` into `bytes`, one read of compressed bytes each.
    private func inflate(_ index: Int, into bytes: inout [UInt8], _ damaged: Damage) throws {
        guard let restarts = plan.restarts else { return }
        let restartLength = Int(plan.interval) / plan.restartsPerSegment
        let first = index * plan.restartsPerSegment
        let last = min(first + plan.restartsPerSegment, restarts.offsets.count)
        // > One inflater of each kind a load: loads run on the reading and the read-ahead threads.
        let fast = StreamInflater()
        var strict: SegmentInflater?
        for restart in first..<last {
            // > Offsets increase strictly inside the entry's data (checked at open): one read a restart segment,
            // > so that only one restart segment's compressed bytes are held at a time.
            let range = restarts.fileRange(ofSegment: restart, dataOffset: plan.dataOffset,
                                           compressedSize: plan.compressedSize)
            let compressed = try FileSystem.read(file.descriptor, at: range.lowerBound, count: range.count,
                                                 path: path)
            guard compressed.count == range.count else { throw damaged("is cut short", code: .truncatedArchive) }
            let outputStart = (restart - first) * restartLength
            let outputRange = outputStart..<(outputStart + min(restartLength, bytes.count - outputStart))
            // > ISA-L first: several times as fast as zlib. Its output is only a candidate: the digest decides.
            // > A restart segment it does not fill exactly goes through zlib, which names the fault.
            let isLast = restart + 1 == restarts.offsets.count
            let filled = compressed.withUnsafeBytes { input in
                bytes.withUnsafeMutableBytes { output in
                    guard let fast else { return false }
                    return Self.inflateFast(fast, input, into: UnsafeMutableRawBufferPointer(rebasing: output[outputRange]),
                                            isLast: isLast)
                }
            }
            if filled {
                try checkCRC(of: restart, bytes, outputRange, damaged)
                continue
            }
            if strict == nil { strict = SegmentInflater() }
            guard let inflater = strict else {
                throw DocumentError(.ioFailure, path: path, reason: "cannot allocate memory to inflate the store")
            }
            let result = compressed.withUnsafeBytes { input in
                bytes.withUnsafeMutableBytes { output in
                    inflater.inflate(input, into: UnsafeMutableRawBufferPointer(rebasing: output[outputRange]),
                                     isLast: isLast)
                }
            }
            switch result {
            case .success(let produced) where produced == outputRange.count:
                try checkCRC(of: restart, bytes, outputRange, damaged)
            case .success(let produced):
                throw damaged("inflates to \(produced) bytes, not \(outputRange.count), at restart point \(restart)", code: .sizeMismatch)
            case .failure(.overflow):
                throw damaged("inflates to more than its share at restart point \(restart)", code: .sizeMismatch)
            case .failure(.misplacedEnd):
                throw damaged(isLast ? "does not end the deflate stream exactly at the entry's end (restart point \(restart) is the last)"
                                     : "does not end at a block boundary outside the final block at restart point \(restart + 1), so inflating the entry as one stream would give other bytes (every zip tool reads it so)",
                              code: .corruptArchive)
            case .failure:
                throw damaged("is not valid deflate data from restart point \(restart) on its own", code: .corruptArchive)
            }
        }
    }

    /// Checks restart segment `restart`, inflated into `bytes[range]`, against its recorded CRC-32 (format version 2,
    /// FORMAT.md 13.1; a version 1 index records none).
    private func checkCRC(of restart: Int, _ bytes: [UInt8], _ range: Range<Int>, _ damaged: Damage) throws {
        guard let expected = plan.restarts?.recordedCRC(ofSegment: restart) else { return }
        var crc = CRC32()
        bytes.withUnsafeBytes { crc.update(UnsafeRawBufferPointer(rebasing: $0[range])) }
        guard crc.value == expected else {
            throw damaged("does not match the CRC-32 \(plan.names.crc32s) records for restart point \(restart); the bundle is damaged, restore it from a backup")
        }
    }

    /// Inflates one restart segment with ISA-L into `output`; whether it filled it exactly, using every input byte,
    /// and stopped where a restart segment must (FORMAT.md 11.4): the last at the stream's end, the others at a
    /// block boundary on a byte boundary outside the final block, nothing held back. Only then is what it gave what
    /// every zip tool gives for these bytes, inflating the entry as one stream; any other end goes through zlib,
    /// which names the fault.
    private static func inflateFast(_ inflater: StreamInflater, _ input: UnsafeRawBufferPointer,
                                    into output: UnsafeMutableRawBufferPointer, isLast: Bool) -> Bool {
        inflater.reset()
        inflater.feed(input)
        var produced = 0
        while produced < output.count {
            guard let (count, finished) = inflater.inflate(into: UnsafeMutableRawBufferPointer(rebasing: output[produced...]))
            else { return false }
            produced += count
            if finished || count == 0 { break }
        }
        guard produced == output.count, inflater.pending == 0 else { return false }
        return isLast ? inflater.hasEndedExactly : inflater.isAtRestartBoundary
    }
}
