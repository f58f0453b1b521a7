@_spi(Core) import MDZCore
@testable import ManagedDocument

/// The fuzzer's bytes read as a stream of choices: every byte string means something, and a stream that runs out
/// reads as zeros.
struct Choices {
    private let bytes: [UInt8]
    private var at = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    var isEmpty: Bool { at >= bytes.count }

    mutating func byte() -> UInt8 {
        guard at < bytes.count else { return 0 }
        defer { at += 1 }
        return bytes[at]
    }

    /// An index below `count` (more than 0), from two bytes.
    mutating func index(below count: Int) -> Int {
        let high = Int(byte()), low = Int(byte())
        return (high << 8 | low) % max(count, 1)
    }

    mutating func pick<T>(_ values: [T]) -> T { values[Int(byte()) % values.count] }
}

/// Edits of a template's metadata, read from ``Choices``: the first byte picks the template (and whether the
/// writable open also saves), then each edit is an operation byte, a value's index, and the bytes its replacement
/// needs. Numbers and strings are replaced by values chosen to break arithmetic and lookups (0, -1, the edges of
/// Int32, UInt32, Int64 and doubles' integers, powers of two ±1, another value of the document ± 1; empty, truncated,
/// repeated and wrong-length digests, odd names and dates); a few edits remove a member or an element, repeat an
/// element, or set the segment interval together with digests that match it, so that interval reaches past the
/// digest check. The result is always valid JSON.
struct MetadataMutation {
    /// The template, by index.
    var template: Int
    /// Whether the writable open changes the store and saves.
    var saves: Bool
    /// What each edit did, for reading a finding: `store.segments.interval = 9223372036854775807`.
    var log: [String] = []
    var metadata: JSONTree

    static let maximumEdits = 12

    init(_ bytes: [UInt8], templates: [DocumentTemplate]) {
        var choices = Choices(bytes)
        let first = choices.byte()
        template = Int(first) % templates.count
        saves = first & 0x80 != 0
        let base = templates[template]
        metadata = base.metadata
        while !choices.isEmpty, log.count < Self.maximumEdits {
            edit(&choices, store: base.store)
        }
    }

    private mutating func edit(_ choices: inout Choices, store: [UInt8]) {
        let isNumber: (JSONTree) -> Bool = { if case .number = $0 { true } else { false } }
        let isString: (JSONTree) -> Bool = { if case .string = $0 { true } else { false } }
        switch choices.byte() % 16 {
        case 0...8:
            let paths = metadata.paths(where: isNumber)
            guard !paths.isEmpty else { return }
            let path = paths[choices.index(below: paths.count)]
            let others = paths.compactMap { metadata.value(at: $0)?.text }
            let value = Self.number(replacing: metadata.value(at: path)?.text ?? "0", others: others, &choices)
            metadata.modify(at: path) { $0 = .number(value) }
            log.append("\(name(of: path)) = \(value)")
        case 9...12:
            let paths = metadata.paths(where: isString)
            guard !paths.isEmpty else { return }
            let path = paths[choices.index(below: paths.count)]
            let others = paths.compactMap { metadata.value(at: $0)?.text }
            let value = Self.string(replacing: metadata.value(at: path)?.text ?? "", others: others, &choices)
            metadata.modify(at: path) { $0 = .string(value) }
            log.append("\(name(of: path)) = \"\(value.count > 80 ? "\(value.prefix(70))… (\(value.utf8.count) bytes)" : value)\"")
        case 13:
            let paths = metadata.paths(where: { _ in true })
            guard !paths.isEmpty else { return }
            let path = paths[choices.index(below: paths.count)]
            log.append("remove \(name(of: path))")
            metadata.remove(at: path)
        case 14:
            let paths = metadata.paths(where: { _ in true }).filter { path in
                if case .array = metadata.value(at: Array(path.dropLast())) { true } else { false }
            }
            guard !paths.isEmpty else { return }
            let path = paths[choices.index(below: paths.count)]
            log.append("repeat \(name(of: path))")
            metadata.duplicate(at: path)
        default:
            guard let intervalPath = metadata.path(ofKeys: ["store", "segments", "interval"]),
                  let digestsPath = metadata.path(ofKeys: ["store", "segments", "sha256"]) else { return }
            let original = metadata.value(at: intervalPath)?.text ?? "0"
            let value = Self.number(replacing: original, others: [original], &choices)
            metadata.modify(at: intervalPath) { $0 = .number(value) }
            // > Digests true to the store for that interval, when there are not too many of them.
            if let interval = Int64(value), interval > 0, Int64(store.count) / interval < 4096 {
                var hasher = SegmentHasher(interval: interval)
                store.withUnsafeBytes { hasher.update($0) }
                let digests = hasher.finalize().joined()
                metadata.modify(at: digestsPath) { $0 = .string(digests) }
                log.append("\(name(of: intervalPath)) = \(value), with digests to match")
            } else {
                log.append("\(name(of: intervalPath)) = \(value)")
            }
        }
    }

    /// The dotted name of the value at `path`: `store.deflateRestarts.offsets[3]`.
    private func name(of path: JSONTree.Path) -> String {
        var node = metadata
        var name = ""
        for index in path {
            switch node {
            case .object(let members) where members.indices.contains(index):
                name += (name.isEmpty ? "" : ".") + members[index].key
                node = members[index].value
            case .array(let elements) where elements.indices.contains(index):
                name += "[\(index)]"
                node = elements[index]
            default:
                return name
            }
        }
        return name
    }

    // MARK: Replacement values

    static func number(replacing original: String, others: [String], _ choices: inout Choices) -> String {
        let value = Int64(original) ?? 0
        switch choices.byte() % 24 {
        case 0: return "0"
        case 1: return "-1"
        case 2: return "1"
        case 3: return String(Int64.max)
        case 4: return String(Int64.min)
        case 5: return String(UInt64(UInt32.max) + 1)
        case 6: return String(UInt32.max)
        case 7: return String(1 << 53)
        case 8: return String((1 << 53) + 1)
        case 9, 10:
            // > 2^k - 1, 2^k or 2^k + 1 (2^63 and 2^64 - 1 included: past Int64, which the decoder must refuse).
            let power = UInt64(1) << (choices.byte() % 64)
            let near = power &+ UInt64(bitPattern: Int64(choices.byte() % 3) - 1)
            return (choices.byte() % 2 == 0 ? "" : "-") + String(near)
        case 11: return String(value &+ Int64(Int8(bitPattern: choices.byte())))
        case 12: return String(value &* 2)
        case 13: return String(value / 2)
        case 14: return others.isEmpty ? original : others[choices.index(below: others.count)]
        case 15:
            let other = others.isEmpty ? value : Int64(others[choices.index(below: others.count)]) ?? 0
            return String(other &+ Int64(choices.byte() % 3) &- 1)
        case 16: return String(Int32.max)
        case 17: return String(Int32.min)
        case 18: return String(Int64(Int32.max) + 1)
        case 19: return String(choices.pick([512, 1024, 4096, 65_535, 65_536, 65_537, 131_072, 1 << 20, 16 << 20,
                                             (1 << 31) - 65_536, 1 << 30, 64 << 30, Int64.max / 2, Int64.max - 1]))
        case 20: return choices.pick(["1.5", "0.5", "-0.0", "1e3", "1E-3", "4096.0"])
        case 21: return choices.pick(["-0", "1e19", "9223372036854775808", "-9223372036854775809",
                                      "18446744073709551616", "1e308", "1e400", "123456789012345678901234567890"])
        case 22: return String(value &- 1)
        default: return String(value &+ 1)
        }
    }

    static func string(replacing original: String, others: [String], _ choices: inout Choices) -> String {
        switch choices.byte() % 16 {
        case 0: return ""
        case 1: return String(original.dropLast(1 + Int(choices.byte()) % max(original.count, 1)))
        case 2: return original + choices.pick(["0", "a", "g", " ", "\u{0}", "é"])
        case 3: return String(repeating: "0", count: 64 * (1 + Int(choices.byte() % 3)))
        case 4: return String(repeating: "f", count: 63)
        case 5: return String(repeating: "f", count: 65)
        case 6: return original.uppercased()
        case 7: return String(repeating: original, count: 2 + Int(choices.byte() % 7))
        case 8: return others.isEmpty ? original : others[choices.index(below: others.count)]
        case 9: return String(repeating: "a", count: Int(choices.byte()) * 257)
        case 10: return choices.pick(["é☕", "\u{0}", "\u{FEFF}x", "\\", "\"", "\n", "%s%n", "\u{10FFFF}", "\u{202E}"])
        case 11:
            return choices.pick([BundleLayout.store, BundleLayout.metadata, BundleLayout.mimetype, "../x", "/etc/passwd",
                                 "AdditionalContent/", "AdditionalContent/../x", "AdditionalContent/note.txt",
                                 "AdditionalContent/NOTE.txt", "StoreContent/persistentStore/", "./mimetype",
                                 "application/vnd.managed-document+zip", "application/zip", "managed-document"])
        case 12:
            return choices.pick(["1970-01-01T00:00:00.000Z", "0000-01-01T00:00:00.000Z", "9999-12-31T23:59:59.999Z",
                                 "2024-02-29T12:00:00Z", "2023-02-29T12:00:00.000Z", "2026-11-24T19:45:00.954+01:00",
                                 "2026-11-24T19:45", "2026-11-24T19:45:00.123456789Z", "2026-11-24T19:45:00.1234567890Z",
                                 "-2026-01-01T00:00:00Z", "+12026-01-01T00:00:00.000Z", "2026-13-01T00:00:00.000Z",
                                 "2026-11-24T24:00:00.000Z", "2026-11-24T19:45:00.Z"])
        case 13:
            guard !original.isEmpty else { return "x" }
            var characters = Array(original)
            characters[choices.index(below: characters.count)] = choices.pick(["0", "g", "A", "-", "/", "é"])
            return String(characters)
        case 14:
            return choices.pick(["00000000-0000-0000-0000-000000000000", "5e1d0c3b-7a4f-4c2e-9b61-0f8d2a6c4e11",
                                 "5E1D0C3B7A4F4C2E9B610F8D2A6C4E11", "not-a-uuid", "{5E1D0C3B-7A4F-4C2E-9B61-0F8D2A6C4E11}"])
        default:
            // > The first k digests of a digest string (or that many characters of any string).
            let count = (original.utf8.count + 63) / 64
            return String(original.prefix(64 * (Int(choices.byte()) % max(count, 1))))
        }
    }
}

extension JSONTree {
    /// A number's or a string's text.
    var text: String? {
        switch self {
        case .number(let text), .string(let text): return text
        case .object, .array, .literal: return nil
        }
    }
}
