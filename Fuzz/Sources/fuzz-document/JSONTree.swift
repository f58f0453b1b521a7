/// A JSON value as a tree that keeps each number's text (so `9223372036854775807` stays exact, which a `Double` would
/// not) and each object's member order, for editing one value of a document's metadata and writing it back as valid
/// JSON.
enum JSONTree: Sendable {  // arrays hold the children: no indirect boxes
    case object([Member])
    case array([JSONTree])
    case string(String)
    /// A number, as its JSON text.
    case number(String)
    /// `true`, `false` or `null`.
    case literal(String)

    struct Member: Sendable {
        var key: String
        var value: JSONTree
    }

    /// Where a value lies: at each level, the index of the member or element to go into.
    typealias Path = [Int]

    /// The tree of well-formed JSON text, or `nil` when the text is not JSON.
    init?(parsing bytes: [UInt8]) {
        var parser = Parser(bytes: bytes)
        guard let tree = parser.value(), parser.atEnd() else { return nil }
        self = tree
    }

    /// The JSON text, compact.
    var encoded: [UInt8] {
        var out: [UInt8] = []
        encode(into: &out)
        return out
    }

    private func encode(into out: inout [UInt8]) {
        switch self {
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            for (index, member) in members.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                Self.encode(string: member.key, into: &out)
                out.append(UInt8(ascii: ":"))
                member.value.encode(into: &out)
            }
            out.append(UInt8(ascii: "}"))
        case .array(let elements):
            out.append(UInt8(ascii: "["))
            for (index, element) in elements.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                element.encode(into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .string(let text):
            Self.encode(string: text, into: &out)
        case .number(let text), .literal(let text):
            out += Array(text.utf8)
        }
    }

    private static func encode(string: String, into out: inout [UInt8]) {
        let hex = Array("0123456789abcdef".utf8)
        out.append(UInt8(ascii: "\""))
        for byte in string.utf8 {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"):
                out += [UInt8(ascii: "\\"), byte]
            case 0..<0x20:
                out += Array("\\u00".utf8) + [hex[Int(byte >> 4)], hex[Int(byte & 0xF)]]
            default:
                out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    // MARK: Paths

    /// The paths of every value for which `include` holds, in document order (the root excluded).
    func paths(where include: (JSONTree) -> Bool) -> [Path] {
        var found: [Path] = []
        func walk(_ node: JSONTree, _ path: Path) {
            if !path.isEmpty, include(node) { found.append(path) }
            switch node {
            case .object(let members):
                for (index, member) in members.enumerated() { walk(member.value, path + [index]) }
            case .array(let elements):
                for (index, element) in elements.enumerated() { walk(element, path + [index]) }
            case .string, .number, .literal:
                break
            }
        }
        walk(self, [])
        return found
    }

    /// The value at `path`.
    func value(at path: Path) -> JSONTree? {
        var node = self
        for index in path {
            switch node {
            case .object(let members) where members.indices.contains(index): node = members[index].value
            case .array(let elements) where elements.indices.contains(index): node = elements[index]
            default: return nil
            }
        }
        return node
    }

    /// The path of the member named by `keys`, one key per level of objects.
    func path(ofKeys keys: [String]) -> Path? {
        var node = self
        var path: Path = []
        for key in keys {
            guard case .object(let members) = node, let index = members.firstIndex(where: { $0.key == key }) else {
                return nil
            }
            path.append(index)
            node = members[index].value
        }
        return path
    }

    /// Replaces the value at `path` with what `body` makes of it (nothing happens when there is no such value).
    mutating func modify(at path: Path, _ body: (inout JSONTree) -> Void) {
        guard let index = path.first else { return body(&self) }
        let rest = Array(path.dropFirst())
        switch self {
        case .object(var members) where members.indices.contains(index):
            members[index].value.modify(at: rest, body)
            self = .object(members)
        case .array(var elements) where elements.indices.contains(index):
            elements[index].modify(at: rest, body)
            self = .array(elements)
        default:
            break
        }
    }

    /// Removes the member or element at `path` (a non-empty path).
    mutating func remove(at path: Path) {
        guard let last = path.last else { return }
        modify(at: Array(path.dropLast())) { parent in
            switch parent {
            case .object(var members) where members.indices.contains(last):
                members.remove(at: last)
                parent = .object(members)
            case .array(var elements) where elements.indices.contains(last):
                elements.remove(at: last)
                parent = .array(elements)
            default:
                break
            }
        }
    }

    /// Inserts a copy of the array element at `path` after it (objects are left alone: no duplicate keys).
    mutating func duplicate(at path: Path) {
        guard let last = path.last else { return }
        modify(at: Array(path.dropLast())) { parent in
            guard case .array(var elements) = parent, elements.indices.contains(last) else { return }
            elements.insert(elements[last], at: last + 1)
            parent = .array(elements)
        }
    }

    // MARK: Parsing

    /// A recursive-descent parser of RFC 8259 JSON (the templates' metadata, which our own encoder wrote).
    private struct Parser {
        let bytes: [UInt8]
        var at = 0

        mutating func atEnd() -> Bool {
            skipSpace()
            return at == bytes.count
        }

        private mutating func skipSpace() {
            while at < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[at]) { at += 1 }
        }

        private mutating func take(_ byte: UInt8) -> Bool {
            skipSpace()
            guard at < bytes.count, bytes[at] == byte else { return false }
            at += 1
            return true
        }

        mutating func value() -> JSONTree? {
            skipSpace()
            guard at < bytes.count else { return nil }
            switch bytes[at] {
            case UInt8(ascii: "{"):
                at += 1
                var members: [Member] = []
                if take(UInt8(ascii: "}")) { return .object(members) }
                repeat {
                    skipSpace()
                    guard let key = string(), take(UInt8(ascii: ":")), let value = value() else { return nil }
                    members.append(Member(key: key, value: value))
                } while take(UInt8(ascii: ","))
                return take(UInt8(ascii: "}")) ? .object(members) : nil
            case UInt8(ascii: "["):
                at += 1
                var elements: [JSONTree] = []
                if take(UInt8(ascii: "]")) { return .array(elements) }
                repeat {
                    guard let element = value() else { return nil }
                    elements.append(element)
                } while take(UInt8(ascii: ","))
                return take(UInt8(ascii: "]")) ? .array(elements) : nil
            case UInt8(ascii: "\""):
                return string().map { .string($0) }
            case UInt8(ascii: "t"), UInt8(ascii: "f"), UInt8(ascii: "n"):
                for word in ["true", "false", "null"] where bytes[at...].starts(with: word.utf8) {
                    at += word.utf8.count
                    return .literal(word)
                }
                return nil
            default:
                let start = at
                let numberBytes = Set("+-0123456789.eE".utf8)
                while at < bytes.count, numberBytes.contains(bytes[at]) { at += 1 }
                return at > start ? .number(String(decoding: bytes[start..<at], as: UTF8.self)) : nil
            }
        }

        private mutating func string() -> String? {
            guard at < bytes.count, bytes[at] == UInt8(ascii: "\"") else { return nil }
            at += 1
            var scalars = String.UnicodeScalarView()
            var raw: [UInt8] = []
            func flush() {
                scalars.append(contentsOf: String(decoding: raw, as: UTF8.self).unicodeScalars)
                raw.removeAll()
            }
            while at < bytes.count {
                let byte = bytes[at]
                at += 1
                switch byte {
                case UInt8(ascii: "\""):
                    flush()
                    return String(scalars)
                case UInt8(ascii: "\\"):
                    guard at < bytes.count else { return nil }
                    let escape = bytes[at]
                    at += 1
                    let simple: [UInt8: UInt8] = [UInt8(ascii: "\""): 0x22, UInt8(ascii: "\\"): 0x5C,
                                                  UInt8(ascii: "/"): 0x2F, UInt8(ascii: "b"): 0x08,
                                                  UInt8(ascii: "f"): 0x0C, UInt8(ascii: "n"): 0x0A,
                                                  UInt8(ascii: "r"): 0x0D, UInt8(ascii: "t"): 0x09]
                    if let plain = simple[escape] {
                        raw.append(plain)
                        continue
                    }
                    guard escape == UInt8(ascii: "u"), var unit = hex4() else { return nil }
                    flush()
                    if (0xD800..<0xDC00).contains(unit), bytes[at...].starts(with: "\\u".utf8) {
                        at += 2
                        guard let low = hex4(), (0xDC00..<0xE000).contains(low) else { return nil }
                        unit = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
                    }
                    scalars.append(Unicode.Scalar(unit) ?? "\u{FFFD}")
                default:
                    raw.append(byte)
                }
            }
            return nil
        }

        private mutating func hex4() -> UInt32? {
            guard at + 4 <= bytes.count,
                  let value = UInt32(String(decoding: bytes[at..<at + 4], as: UTF8.self), radix: 16) else { return nil }
            at += 4
            return value
        }
    }
}
