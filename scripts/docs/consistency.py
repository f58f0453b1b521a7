#!/usr/bin/env python3
"""Checks what the documents repeat from the code, so that it cannot drift:

- the version of Sources/MDZCore/Version.swift is the one README.md (its "Version X.Y.Z" line and the
  `from: "X.Y.Z"` of its manifest), CHANGELOG.md (its newest entry), docs/CLI.md ("describes version X.Y.Z") and
  docs/FORMAT.md ("version X.Y.Z") name;
- README.md's list of what `scripts/setup.sh` installs is setup.sh's `packages=(…)`.

    python3 scripts/docs/consistency.py     exit 0, or 1 naming each difference
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
problems = []


def read(relative):
    return (ROOT / relative).read_text()


match = re.search(r'public static let string = "(\d+\.\d+\.\d+)"', read("Sources/MDZCore/Version.swift"))
if not match:
    sys.exit("[consistency] Sources/MDZCore/Version.swift: no `public static let string = \"X.Y.Z\"`")
version = match.group(1)

expectations = [
    ("README.md", r"^Version (\d+\.\d+\.\d+) ", "its 'Version X.Y.Z' line"),
    ("README.md", r'\.package\(url: "[^"]+", from: "(\d+\.\d+\.\d+)"\)', "the manifest's URL form"),
    ("CHANGELOG.md", r"^## (\d+\.\d+\.\d+)", "its newest entry"),
    ("docs/CLI.md", r"describes version (\d+\.\d+\.\d+)", "'describes version'"),
    ("docs/FORMAT.md", r"version (\d+\.\d+\.\d+)\)", "the reference implementation's version"),
]
for relative, pattern, what in expectations:
    found = re.search(pattern, read(relative), re.MULTILINE)
    if not found:
        problems.append(f"{relative}: {what} is missing")
    elif found.group(1) != version:
        problems.append(f"{relative}: {what} says {found.group(1)}, Version.swift says {version}")

setup = re.search(r"^packages=\(([^)]*)\)", read("scripts/setup.sh"), re.MULTILINE)
listed = re.search(r"`scripts/setup\.sh` installs only what is missing:(.*?)\.\s", read("README.md"), re.DOTALL)
if not setup or not listed:
    problems.append("scripts/setup.sh's packages=(…) or README.md's 'installs only what is missing:' list is missing")
else:
    installed = set(setup.group(1).split())
    documented = set(re.findall(r"`([^`]+)`", listed.group(1)))
    if installed != documented:
        problems.append(f"README.md lists what scripts/setup.sh installs as {sorted(documented)}; setup.sh installs "
                        f"{sorted(installed)} (missing from README: {sorted(installed - documented)}, "
                        f"not installed: {sorted(documented - installed)})")

for problem in problems:
    print(f"[consistency] {problem}", file=sys.stderr)
if problems:
    sys.exit(1)
print(f"[consistency] version {version} everywhere; README lists the {len(installed)} packages setup.sh installs",
      file=sys.stderr)
