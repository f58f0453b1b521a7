#!/usr/bin/env python3
"""Fails when a layer of the ManagedDocument library, or of the reading core under it, reaches upward.

The folders of both targets (Sources/MDZCore and Sources/ManagedDocument) are layers, lowest first (the order the DocC
article "Architecture" explains); a folder of either is the same layer. That the core never reaches the library the
compiler enforces (the core cannot import it); this checks the order of the layers inside each:

    Support -> Archive -> Format -> Store -> Bundle -> Legacy -> Migration -> Document -> Batch

A file may use what its own layer and the layers below it declare, never what a layer above declares. The one error
type (DocumentError.swift, at the top of the module) counts as Support: every layer throws it.

What counts as a use: an identifier, outside comments and string literals, that names a type, a top-level function
or constant declared only in a higher layer, or a member that only a higher layer's extension adds (`.camelCaseName`,
or `camelCaseName(` called on an implicit self; declared by no type or extension of the file's layer or those below
it: one-word members such as `.open` are too common to tell apart from other APIs'). A top-level name declared in two
layers is a problem of its own: its uses could not be told apart.

    scripts/docs/layers.py           check; exit 0 when clean, 1 listing each upward reference as path:line
    scripts/docs/layers.py --list    print each layer's declared names
"""
import re
import sys
from pathlib import Path

LAYERS = ["Support", "Archive", "Format", "Store", "Bundle", "Legacy", "Migration", "Document", "Batch"]
PACKAGE = Path(__file__).resolve().parents[2]
# The reading core (MDZCore: Support, Archive, Format, Store, Bundle's reading) and the library over it: a folder of
# either is the same layer. The compiler keeps the core from reaching the library (it cannot import it); this check
# keeps each layer from reaching a higher one inside each.
ROOTS = [PACKAGE / "Sources" / "MDZCore", PACKAGE / "Sources" / "ManagedDocument"]

TOP_LEVEL = re.compile(r"^(?:@\w+(?:\([^)]*\))?\s+)*(?:(?:public|package|internal|private|fileprivate|final|open|"
                       r"nonisolated|static)\s+)*(?:struct|class|enum|protocol|actor|typealias|func|let|var)\s+(\w+)")
EXTENSION = re.compile(r"^(?:public\s+|package\s+|internal\s+)?extension\s+([\w.]+)")
MEMBER = re.compile(r"^    (?:@\w+(?:\([^)]*\))?\s+)*(?:(?:public|package|internal|private|fileprivate|static|mutating|final|nonisolated)\s+)*"
                    r"(?:func|var|let)\s+(\w+)")
IDENTIFIER = re.compile(r"(\.)?\b([A-Za-z_]\w*)\b(\()?")


def layer_of(path: Path) -> str:
    root = next(root for root in ROOTS if root in path.parents)
    relative = path.relative_to(root)
    return relative.parts[0] if len(relative.parts) > 1 else "Support"


def code_lines(text: str) -> list[str]:
    """The file's lines with comments and string literals blanked (line numbers kept)."""
    text = re.sub(r'"""(?:.|\n)*?"""', lambda m: "\n" * m.group(0).count("\n"), text)
    text = re.sub(r"/\*(?:.|\n)*?\*/", lambda m: "\n" * m.group(0).count("\n"), text)
    lines = []
    for line in text.split("\n"):
        line = re.sub(r'"(?:\\.|[^"\\])*"', '""', line)
        lines.append(line.split("//", 1)[0])
    return lines


def main() -> int:
    files = sorted(p for root in ROOTS for p in root.rglob("*.swift") if p.parts[-2] != "ManagedDocument.docc")
    unknown = {layer_of(p) for p in files} - set(LAYERS)
    if unknown:
        print(f"layers: folders with no place in the order: {sorted(unknown)}; add them to LAYERS")
        return 1
    sources = {p: code_lines(p.read_text()) for p in files}
    core = ROOTS[0]
    tables = {"all": declarations(sources), "core": declarations({p: l for p, l in sources.items() if core in p.parents})}
    declared, members, all_members = tables["all"]
    if "--list" in sys.argv:
        for layer in LAYERS:
            print(f"{layer}: {' '.join(sorted(declared[layer]))}")
            print(f"  extension members: {' '.join(sorted(members[layer]))}")
        return 0

    problems = []
    # > A name declared in two layers cannot be told apart by name: each is a problem to rename.
    owners: dict[str, list[str]] = {}
    for layer in LAYERS:
        for name in declared[layer]:
            owners.setdefault(name, []).append(layer)
    for name, layers in sorted(owners.items()):
        if len(layers) > 1:
            problems.append(f"{name} is declared in {' and '.join(layers)}: the check cannot tell its uses apart")
    for path, lines in sources.items():
        # > The core cannot import the library: only the core's own higher layers can be reached from it.
        declared, members, all_members = tables["core" if core in path.parents else "all"]
        level = LAYERS.index(layer_of(path))
        below = set().union(*(declared[l] | all_members[l] for l in LAYERS[: level + 1]))
        above = {name: layer for layer in LAYERS[level + 1:] for name in declared[layer]}
        above_members = {name: layer for layer in LAYERS[level + 1:] for name in members[layer]
                         if re.search(r"[a-z][A-Z]", name)}
        for number, line in enumerate(lines, 1):
            for dot, name, call in IDENTIFIER.findall(line):
                if name in below:
                    continue
                # > `.member`, or `member(` called on an implicit self: an extension member of a higher layer.
                owner = above.get(name) if not dot else above_members.get(name)
                if not owner and not dot and call:
                    owner = above_members.get(name)
                if owner:
                    problems.append(f"{path.relative_to(PACKAGE)}:{number}: {layer_of(path)} uses {name} ({owner})")
    if problems:
        print("\n".join(problems))
        print(f"layers: {len(problems)} problems; the order is {' -> '.join(LAYERS)}")
        return 1
    print(f"layers: {len(files)} files checked, no upward reference ({' -> '.join(LAYERS)})")
    return 0


def declarations(sources):
    """Per layer: the top-level names declared, the members extensions add, and every member declared."""
    declared: dict[str, set[str]] = {layer: set() for layer in LAYERS}
    members: dict[str, set[str]] = {layer: set() for layer in LAYERS}  # added by extensions
    all_members: dict[str, set[str]] = {layer: set() for layer in LAYERS}  # declared by types and extensions
    for path, lines in sources.items():
        layer = layer_of(path)
        in_extension = False
        for line in lines:
            if match := TOP_LEVEL.match(line):
                declared[layer].add(match.group(1))
                in_extension = False
            elif EXTENSION.match(line):
                in_extension = True
            elif match := MEMBER.match(line):
                all_members[layer].add(match.group(1))
                if in_extension:
                    members[layer].add(match.group(1))
            elif line.startswith("}"):
                in_extension = False
    return declared, members, all_members


if __name__ == "__main__":
    sys.exit(main())
