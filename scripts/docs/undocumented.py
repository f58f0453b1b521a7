#!/usr/bin/env python3
"""Lists the public symbols of a Swift symbol graph that have no doc comment of their own.

  undocumented.py MODULE.symbols.json [MODULE@OTHER.symbols.json ...]

A symbol counts as documented when it has a doc comment, or when the compiler made it (synthesized: memberwise and
Codable conformances, enum raw values) or it implements a protocol requirement whose documentation it inherits
(`sourceOrigin`). Exit 0 when every public symbol is documented; 1 with one line per symbol otherwise.
"""
import json, sys

missing = []
for path in sys.argv[1:]:
    graph = json.load(open(path))
    for symbol in graph["symbols"]:
        if symbol.get("accessLevel") not in ("public", "open"):
            continue
        if symbol.get("docComment") or symbol.get("sourceOrigin"):
            continue
        if symbol["identifier"]["precise"].startswith("s:") and "::SYNTHESIZED::" in symbol["identifier"]["precise"]:
            continue
        name = ".".join(symbol["pathComponents"])
        if name.split(".")[-1] in ("init(from:)", "encode(to:)", "hash(into:)", "==(_:_:)", "hashValue", "rawValue",
                                   "init(rawValue:)", "description", "errorDescription", "failureReason", "id"):
            continue  # a conformance's requirement, documented by the protocol
        location = symbol.get("location", {})
        where = f"{location.get('uri', '').split('/Sources/')[-1]}:{location.get('position', {}).get('line', 0) + 1}"
        missing.append(f"{where}: {symbol['kind']['displayName'].lower()} {name}")
for line in sorted(missing):
    print(f"undocumented: {line}")
print(f"{len(missing)} public symbols without a doc comment", file=sys.stderr)
sys.exit(1 if missing else 0)
