import Foundation

/// python3, for what its standard library does as an independent check: sqlite3 and zipfile.
public enum Python {
    /// Runs `python3 -c script arguments…` to its end; its standard output. Throws `ProcessFailure` when it exits
    /// with another status than 0.
    @discardableResult
    public static func run(_ script: String, _ arguments: [String]) throws -> String {
        let result = try execute("python3", ["-c", script] + arguments)
        guard result.status == 0 else { throw ProcessFailure(program: "python3", status: result.status, stderr: result.stderr) }
        return result.stdout
    }

    /// Copies `bundle` to `target` with `DocumentMetadata.json` edited by python's zipfile: each dotted key path set
    /// to a raw JSON value (`null` removes the key). With `statement`, a python statement run on `metadata` after the
    /// edits, and the JSON then written compact (indented with sorted keys otherwise). The metadata is the bundle's
    /// last entry, so it is replaced in place; every other entry's bytes (the store's deflate stream too) are copied
    /// untouched.
    public static func rewritingMetadata(of bundle: String, to target: String, _ edits: [(String, String)],
                                         then statement: String? = nil) throws {
        let patch = "{" + edits.map { "\"\($0.0)\": \($0.1)" }.joined(separator: ", ") + "}"
        try run(metadataRewriter, [bundle, target, patch] + (statement.map { [$0] } ?? []))
    }

    static let metadataRewriter = """
        import json, shutil, sys, zipfile
        source, target, edits = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
        statement = sys.argv[4] if len(sys.argv) > 4 else None
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
