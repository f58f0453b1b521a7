#!/usr/bin/env python3
"""Fails when a layer of the ManagedDocument library reaches upward.

The library's folders are layers, lowest first (the order the DocC article "Architecture" explains):

    Support -> Archive -> Format -> Store -> Bundle -> Legacy -> Migration -> Document -> Batch

A file may use what its own layer and the layers below it declare, never what a layer above declares. The one error
type (DocumentError.swift, at the top of the module) counts as Support: every layer throws it.

What counts as a use: an identifier, outside comments and string literals, that names a type, a top-level function
or constant declared only in a higher layer, or a member that only a higher layer's extension adds (`.camelCaseName`, declared by no type or extension of the
file's layer or those below it: one-word members such as `.open` are too common to tell apart from other APIs').

    scripts/docs/layers.py           check; exit 0 when clean, 1 listing each upward reference as path:line
    scripts/docs/layers.py --list    print each layer's declared names
"""
import re
import sys
from pathlib import Path

LAYERS = ["Support", "Archive", "Format", "Store", "Bundle", "Legacy", "Migration", "Document", "Batch"]
ROOT = Path(__file__).resolve().parents[2] / "Sources" / "ManagedDocument"

TOP_LEVEL = re.compile(r"^(?:@\w+(?:\([^)]*\))?\s+)*(?:(?:public|package|internal|private|fileprivate|final|open|"
                       r"nonisolated|static)\s+)*(?:struct|class|enum|protocol|actor|typealias|func|let|var)\s+(\w+)")
EXTENSION = re.compile(r"^(?:public\s+|package\s+|internal\s+)?extension\s+([\w.]+)")
MEMBER = re.compile(r"^    (?:@\w+\s+)*(?:(?:public|package|internal|private|fileprivate|static|mutating|final|nonisolated)\s+)*"
                    r"(?:func|var|let)\s+(\w+)")
IDENTIFIER = re.compile(r"(\.)?\b([A-Za-z_]\w*)\b")


def layer_of(path: Path) -> str:
    relative = path.relative_to(ROOT)
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
    files = sorted(p for p in ROOT.rglob("*.swift") if p.parts[-2] != "ManagedDocument.docc")
    unknown = {layer_of(p) for p in files} - set(LAYERS)
    if unknown:
        print(f"layers: folders with no place in the order: {sorted(unknown)}; add them to LAYERS")
        return 1
    declared: dict[str, set[str]] = {layer: set() for layer in LAYERS}
    members: dict[str, set[str]] = {layer: set() for layer in LAYERS}  # added by extensions
    all_members: dict[str, set[str]] = {layer: set() for layer in LAYERS}  # declared by types and extensions
    sources = {p: code_lines(p.read_text()) for p in files}
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
    if "--list" in sys.argv:
        for layer in LAYERS:
            print(f"{layer}: {' '.join(sorted(declared[layer]))}")
            print(f"  extension members: {' '.join(sorted(members[layer]))}")
        return 0

    problems = []
    for path, lines in sources.items():
        level = LAYERS.index(layer_of(path))
        below = set().union(*(declared[l] | all_members[l] for l in LAYERS[: level + 1]))
        above = {name: layer for layer in LAYERS[level + 1:] for name in declared[layer]}
        above_members = {name: layer for layer in LAYERS[level + 1:] for name in members[layer]
                         if re.search(r"[a-z][A-Z]", name)}
        for number, line in enumerate(lines, 1):
            for dot, name in IDENTIFIER.findall(line):
                if name in below:
                    continue
                owner = above.get(name) if not dot else above_members.get(name)
                if owner:
                    problems.append(f"{path.relative_to(ROOT.parents[1])}:{number}: {layer_of(path)} uses {name} ({owner})")
    if problems:
        print("\n".join(problems))
        print(f"layers: {len(problems)} upward references; the order is {' -> '.join(LAYERS)}")
        return 1
    print(f"layers: {len(files)} files checked, no upward reference ({' -> '.join(LAYERS)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
