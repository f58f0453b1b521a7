#!/usr/bin/env python3
"""Checks docs/CLI.md's example outputs against the built docconvert, or regenerates them.

    python3 scripts/docs/examples.py DOCCONVERT [--update]

An example is a fenced block whose first line is `$ docconvert …` and whose fence follows a marker comment:

    <!-- example: SETUP -->

SETUP is shell run first (may be empty), in a fresh folder holding a copy of Samples/stores' files, with
`docconvert` on PATH. The block's command is then run there and its standard output compared with the rest of the
block, after both are normalized: UUIDs, ISO 8601 dates, SHA-256 digests and the figures that follow from them (the
metadata entry's compressed size, the bundle's size and ratio) are replaced by placeholders. Everything else (sizes of
the store, segment intervals, entry order, wording) must match. With --update, the blocks are rewritten with the
outputs (exit 0); without, the first difference of each example that differs is printed (exit 1).
"""
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCUMENT = ROOT / "docs" / "CLI.md"
MARKER = re.compile(r"^<!--\s*example:(.*?)-->\s*$")

VOLATILE = [
    (re.compile(r"[0-9A-F]{8}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{12}"), "<uuid>"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"), "<date>"),
    (re.compile(r"\b[0-9a-f]{64}\b"), "<sha256>"),
    (re.compile(r"\b[0-9a-f]{16}…"), "<sha256-prefix>…"),
    # The metadata holds the UUID and dates, so its deflated size, the bundle's size and the ratio vary by a byte.
    (re.compile(r"(deflate\s+\d+\s+)\d+(\s+DocumentMetadata\.json)"), r"\1<n>\2"),
    (re.compile(r"(\"(?:fileSize|compressionRatio)\" : )[0-9.]+"), r"\1<n>"),
    (re.compile(r"size:( +)[0-9.]+ (B|KiB|MiB) holding ([0-9.]+ (?:B|KiB|MiB)) \([0-9.]+:1\)"),
     r"size:\1<n> holding \3 (<n>:1)"),
]


def normalize(text: str) -> str:
    for pattern, replacement in VOLATILE:
        text = pattern.sub(replacement, text)
    # A JSON entry list: the metadata entry's compressed size and CRC-32 follow from its UUID and dates.
    text = re.sub(r'("compressedSize" : )\d+(,\n\s+"crc32" : ")[0-9a-f]{8}("[^}]*"name" : "DocumentMetadata\.json")',
                  r"\1<n>\2<crc>\3", text)
    text = re.sub(r'("crc32" : ")[0-9a-f]{8}("[^}]*"name" : "DocumentMetadata\.json")', r"\1<crc>\2", text)
    return text


def examples(lines):
    """(marker line index, fence start index, fence end index, setup)"""
    found = []
    for i, line in enumerate(lines):
        match = MARKER.match(line)
        if not match:
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        if j >= len(lines) or lines[j].strip() != "```" or not lines[j + 1].startswith("$ docconvert "):
            sys.exit(f"[examples] docs/CLI.md:{i + 1}: an example marker not followed by a block starting '$ docconvert'")
        end = j + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        found.append((i, j, end, match.group(1).strip()))
    return found


def run(binary: str, setup: str, command: str) -> str:
    with tempfile.TemporaryDirectory(prefix="cli-examples-") as work:
        folder = Path(work)
        (folder / "bin").mkdir()
        os.symlink(binary, folder / "bin" / "docconvert")
        for item in (ROOT / "Samples" / "stores").iterdir():
            target = folder / item.name
            if item.is_dir():
                shutil.copytree(item, target, symlinks=True)
            else:
                shutil.copy2(item, target)
        environment = dict(os.environ, PATH=f"{folder / 'bin'}:{os.environ['PATH']}", TMPDIR=str(folder),
                           TZ="UTC")
        script = (setup + "\n" if setup else "") + command
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=folder, env=environment,
                                capture_output=True, text=True)
        if result.returncode != 0:
            sys.exit(f"[examples] `{command}` (after `{setup}`) failed with {result.returncode}: {result.stderr}")
        return result.stdout


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary = os.path.abspath(sys.argv[1])
    update = "--update" in sys.argv[2:]
    lines = DOCUMENT.read_text().split("\n")
    failures = 0
    found = examples(lines)
    if not found:
        sys.exit("[examples] docs/CLI.md has no <!-- example: … --> block")
    for marker, start, end, setup in reversed(found):  # from the end, so that updates keep earlier indices
        command = lines[start + 1][2:]
        expected = "\n".join(lines[start + 2:end]) + "\n"
        actual = run(binary, setup, command)
        if update:
            lines[start + 2:end] = actual.rstrip("\n").split("\n")
            continue
        if normalize(expected) != normalize(actual):
            failures += 1
            diff = difflib.unified_diff(normalize(expected).splitlines(), normalize(actual).splitlines(),
                                        "docs/CLI.md", command, lineterm="", n=1)
            print(f"[examples] docs/CLI.md:{start + 2}: `{command}` prints something else:", file=sys.stderr)
            print("\n".join(list(diff)[:40]), file=sys.stderr)
    if update:
        DOCUMENT.write_text("\n".join(lines))
        print(f"[examples] {len(found)} examples of docs/CLI.md regenerated", file=sys.stderr)
        return
    if failures:
        sys.exit(f"[examples] {failures} of {len(found)} examples differ from the binary's output; "
                 "regenerate them: python3 scripts/docs/examples.py DOCCONVERT --update")
    print(f"[examples] {len(found)} examples of docs/CLI.md match the binary's output", file=sys.stderr)


if __name__ == "__main__":
    main()
