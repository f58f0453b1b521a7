import Foundation
import Glibc

/// python3, for what its standard library does as an independent check: sqlite3 and zipfile.
public enum Python {
    /// Runs `python3 -c script arguments…` to its end; its standard output. Throws `ProcessFailure` when it exits
    /// with another status than 0.
    @discardableResult
    public static func run(_ script: String, _ arguments: [String]) throws -> String {
        let result = try execute(script, arguments)
        guard result.status == 0 else { throw ProcessFailure(program: "python3", status: result.status, stderr: result.stderr) }
        return result.stdout
    }

    /// Runs `python3 -c script arguments…` to its end, or its death (a script that kills itself, as an app that
    /// crashes); its exit status, standard output and standard error, whatever the status.
    @discardableResult
    public static func execute(_ script: String, _ arguments: [String]) throws
        -> (status: Int32, stdout: String, stderr: String) {
        try TestSupport.execute("python3", ["-c", script] + arguments)
    }

    /// Copies `bundle` to `target` with `DocumentMetadata.json` edited by python's zipfile: each dotted key path set
    /// to a raw JSON value (`null` removes the key). With `statement`, a python statement run on `metadata` after the
    /// edits, and the JSON then written compact (indented with sorted keys otherwise). The metadata is the bundle's
    /// last entry, so it is replaced in place; every other entry's bytes (the store's deflate stream too) are copied
    /// untouched.
    ///
    /// With `resealing` (the default), a version 2 bundle's derived values are computed again from the edited
    /// metadata and the store's bytes, as an honest writer would: `store.digest` from `store.size` and
    /// `store.segments` (FORMAT.md 13.1), `store.deflateRestarts.crc32s` at the index's interval, and its
    /// `compressedCRC32Cs` (when the edits left the key) at the index's offsets. So an edit
    /// tests the rule it breaks, not the digest that no longer matches; without it, the edits alone are written.
    public static func rewritingMetadata(of bundle: String, to target: String, _ edits: [(String, String)],
                                         then statement: String? = nil, resealing: Bool = true) throws {
        let patch = "{" + edits.map { "\"\($0.0)\": \($0.1)" }.joined(separator: ", ") + "}"
        try run(metadataRewriter, [bundle, target, patch, statement ?? "", resealing ? "reseal" : ""])
    }

    static let metadataRewriter = """
        import json, shutil, sys, zipfile
        source, target, edits = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
        statement = sys.argv[4] or None
        reseal = sys.argv[5] == 'reseal'
        def resealed(metadata, archive):
            # What a writer derives (FORMAT.md 13.1), computed from whatever the edits left.
            import hashlib, zlib
            store = metadata.get('store', {})
            if metadata.get('formatVersion') != 2 or not isinstance(store, dict):
                return
            data = None
            restarts = store.get('deflateRestarts')
            if isinstance(restarts, dict) and isinstance(restarts.get('interval'), int) and restarts['interval'] > 0:
                data = archive.read('StoreContent/persistentStore')
                step = restarts['interval']
                restarts['crc32s'] = ''.join('%08x' % zlib.crc32(data[i:i + step]) for i in range(0, len(data), step))
                offsets = restarts.get('offsets')
                if 'compressedCRC32Cs' in restarts and isinstance(offsets, list) and all(isinstance(o, int) for o in offsets):
                    # The CRC-32C of each restart segment's compressed bytes, with ISA-L's crc32_iscsi.
                    import ctypes, struct
                    isal = ctypes.CDLL('libisal.so.2')
                    isal.crc32_iscsi.restype = ctypes.c_uint
                    isal.crc32_iscsi.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint]
                    info = archive.getinfo('StoreContent/persistentStore')
                    with open(source, 'rb') as file:
                        file.seek(info.header_offset)
                        header = file.read(30)
                        name, extra = struct.unpack('<HH', header[26:30])
                        file.seek(info.header_offset + 30 + name + extra)
                        stream = file.read(info.compress_size)
                    ends = offsets[1:] + [len(stream)]
                    restarts['compressedCRC32Cs'] = ''.join(
                        '%08x' % (~isal.crc32_iscsi(stream[a:b], b - a, 0xFFFFFFFF) & 0xFFFFFFFF)
                        for a, b in zip(offsets, ends) if 0 <= a <= b <= len(stream))
            segments = store.get('segments')
            size = store.get('size')
            if isinstance(segments, dict) and isinstance(size, int) and isinstance(segments.get('interval'), int):
                try:
                    raw = bytes.fromhex(segments.get('sha256', ''))
                except (ValueError, TypeError):
                    return
                mask = (1 << 64) - 1
                store['digest'] = hashlib.sha256(b'MDZ-store-digest-2' + (size & mask).to_bytes(8, 'little')
                                                 + (segments['interval'] & mask).to_bytes(8, 'little') + raw).hexdigest()
        shutil.copyfile(source, target)
        with zipfile.ZipFile(target, 'a') as archive:
            info = archive.getinfo('DocumentMetadata.json')
            assert max(i.header_offset for i in archive.infolist()) == info.header_offset, 'the metadata is not last'
            metadata = json.loads(archive.read(info))
            for path, value in edits.items():
                *parents, key = path.split('.')
                node = metadata
                for part in parents:
                    node = node.setdefault(part, {})
                if value is None:
                    node.pop(key, None)
                else:
                    node[key] = value
            if statement:
                exec(statement)
            if reseal:
                resealed(metadata, archive)
            archive.filelist.remove(info)
            del archive.NameToInfo[info.filename]
            archive.start_dir = info.header_offset
            archive.fp.seek(info.header_offset)
            archive.fp.truncate()
            fresh = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            fresh.compress_type = zipfile.ZIP_DEFLATED
            fresh.create_system = 3
            fresh.external_attr = info.external_attr
            layout = {'separators': (',', ':')} if statement else {'indent': 2, 'sort_keys': True}
            archive.writestr(fresh, json.dumps(metadata, **layout))
        """
}

/// A python3 script running beside the test, unbuffered (`python3 -u -c script arguments…`), with its standard input
/// and output the test's: it says when it holds what the test needs (a lock, a transaction, an open store), waits
/// for a line, goes on. It is killed when this is released while it still runs.
public final class PythonProcess {
    public let process = Process()
    private let input = Pipe(), output = Pipe()
    private var received = ""

    /// - Parameter python: the python to run (the one on `PATH`, or a path: ``SQLiteHosts/python`` loads extensions).
    public init(_ script: String, _ arguments: [String], python: String = "python3") throws {
        process.executableURL = URL(fileURLWithPath: python.hasPrefix("/") ? python : "/usr/bin/env")
        process.arguments = (python.hasPrefix("/") ? [] : [python]) + ["-u", "-c", script] + arguments
        process.standardInput = input
        process.standardOutput = output
        try process.run()
    }

    /// The next line it prints, without its newline (a read may return part of one: lines are put together as they
    /// come); `nil` once it closed its output.
    public func readLine() -> String? {
        while !received.contains("\n") {
            let data = output.fileHandleForReading.availableData
            if data.isEmpty {
                defer { received = "" }
                return received.isEmpty ? nil : received
            }
            received += String(decoding: data, as: UTF8.self)
        }
        let line = String(received.prefix { $0 != "\n" })
        received = String(received.drop { $0 != "\n" }.dropFirst())
        return line
    }

    /// Writes `line` and a newline to its standard input.
    public func send(_ line: String) {
        input.fileHandleForWriting.write(Data((line + "\n").utf8))
    }

    /// Closes its standard input and waits for its end: its exit status and what it printed since the last line read.
    public func finish() -> (status: Int32, output: String) {
        try? input.fileHandleForWriting.close()  // Squash: a script that reads no more input ends the same.
        let rest = received + String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        received = ""
        process.waitUntilExit()
        return (process.terminationStatus, rest)
    }

    /// Ends it at once (SIGKILL) and waits for it.
    public func kill() {
        if process.isRunning { Glibc.kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }

    deinit { if process.isRunning { process.terminate() } }
}
