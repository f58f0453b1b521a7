#!/usr/bin/env bash
# Checks that every fenced ```swift snippet of README.md and of the DocC articles
# (Sources/ManagedDocument/ManagedDocument.docc/*.md) compiles in a package outside this one, as an app's code.
#
#   scripts/docs/snippets.sh      type-check them as an app's code against this package's built modules (about 10 s:
#                                 what CI runs); exit 0 when they compile, 1 listing each error at its line
#   scripts/docs/snippets.sh --app  build them as an outside app package (about 3 minutes cold: the dependencies
#                                 are built again); exit 0 when they compile, 1 listing each error (and each warning
#                                 from Sources/ManagedDocument) at its line in the markdown
#
# Type-checking imports the modules `swift build` made for this package (the library's public API only: no snippet
# says `@testable`, and SPI stays hidden without `@_spi`), in a module of its own, so it proves what an app's
# compiler would accept; the app build proves also that the manifest resolves and that an app's clean build of the
# library shows no warning.
#
# The outside package is the app of README.md's "Add the package": its Package.swift is that section's manifest, used
# as written (every manifest snippet must be the same), beside a symbolic link ManagedDocument to this repository, so
# `.package(path: "../ManagedDocument")` finds it. It builds with
# `--explicit-target-dependency-import-check error`: a module the manifest does not declare cannot be imported.
#
# Each snippet becomes one file, its lines wrapped in an `async throws` function (with #sourceLocation, so that a
# diagnostic names the markdown file and line), its `import` lines above the function. A snippet with no `import`
# line gets every module the manifest declares (ManagedDocument, GRDB, SystemPackage, Logging) and Foundation.
# An HTML comment on the line before a snippet says how to take it:
#
#   <!-- snippet: continues -->     the snippet goes on from the previous one of the same file (same function)
#   <!-- snippet: prelude           lines the snippet assumes, compiled before it but not shown
#   var open = Document.OpenOptions()
#   -->
#   <!-- snippet: fragment -->      not compiled (keep these rare, and say why in the comment)
#
# The build's scratch folder is .build-snippets/ (it builds the dependencies once more: a few minutes when cold,
# seconds when warm); the package is made afresh in .build-snippets/packages/app/ on every run.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
mode=typecheck
case "${1:-}" in
    "") ;;
    --app) mode=app ;;
    *) echo "usage: scripts/docs/snippets.sh [--app]" >&2; exit 64 ;;
esac
scratch="$root/.build-snippets"
app="$scratch/packages/app"   # beside packages/ManagedDocument, the link to this repository
log() { echo "[snippets] $*" >&2; }

rm -rf "$scratch/packages"
mkdir -p "$app"
ln -s "$root" "$scratch/packages/ManagedDocument"
target=$(python3 - "$root" "$app" <<'PY'
import re
import sys
from pathlib import Path

root, app = Path(sys.argv[1]), Path(sys.argv[2])
documents = [root / "README.md"] + sorted((root / "Sources/ManagedDocument/ManagedDocument.docc").glob("*.md"))
MARKER = re.compile(r"<!--\s*snippet:\s*(\w+)")
IMPORT = re.compile(r"^import\s+(\w+)\s*$")

def fail(message):
    print(f"[snippets] {message}", file=sys.stderr)
    sys.exit(1)

manifests = []   # (where, text)
groups = []      # per file: {"where", "imports", "parts": [(path, first line number, lines)]}
for document in documents:
    lines = document.read_text().splitlines()
    relative = document.relative_to(root)
    previous = None
    i = 0
    while i < len(lines):
        if lines[i].strip() != "```swift":
            i += 1
            continue
        start = i + 1
        end = start
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if end == len(lines):
            fail(f"{relative}:{i + 1}: a ```swift block that never ends")
        body = lines[start:end]
        i = end + 1
        # The marker comment, if any, ends on the last non-blank line before the fence.
        kind, prelude, prelude_line = None, [], 0
        j = start - 2
        while j >= 0 and not lines[j].strip():
            j -= 1
        if j >= 0 and lines[j].rstrip().endswith("-->"):
            k = j
            while k >= 0 and "<!--" not in lines[k]:
                k -= 1
            match = MARKER.search(lines[k]) if k >= 0 else None
            if match:
                kind = match.group(1)
                prelude, prelude_line = lines[k + 1:j], k + 2
                if kind not in ("continues", "prelude", "fragment"):
                    fail(f"{relative}:{k + 1}: unknown snippet marker '{kind}' (continues, prelude or fragment)")
        where = f"{relative}:{start}"
        if body and body[0].startswith("// swift-tools-version"):
            manifests.append((where, "\n".join(body) + "\n"))
            continue
        if kind == "fragment":
            print(f"[snippets] {where}: a fragment, not compiled", file=sys.stderr)
            continue
        imports = [m.group(1) for m in map(IMPORT.match, body) if m]
        code = [(n, line) for n, line in enumerate(body, start) if not IMPORT.match(line)]
        if kind == "continues":
            if previous is None:
                fail(f"{where}: 'snippet: continues' but no snippet before it in {relative}")
        else:
            previous = {"where": where, "imports": [], "parts": []}
            groups.append(previous)
        previous["imports"] += [name for name in imports if name not in previous["imports"]]
        if kind == "prelude":
            previous["parts"].append((document, prelude_line, prelude))
        previous["parts"].append((document, code[0][0] + 1 if code else start + 1, [line for _, line in code]))

if not manifests:
    fail("README.md has no Package.swift snippet (one starting with '// swift-tools-version') to build the snippets with")
for where, text in manifests[1:]:
    if text != manifests[0][1]:
        fail(f"{where}: this Package.swift differs from the one at {manifests[0][0]}; show the same manifest")
manifest = manifests[0][1]
targets = re.findall(r'\.(?:executableTarget|target)\(\s*name:\s*"([^"]+)"', manifest)
if len(targets) != 1:
    fail(f"{manifests[0][0]}: the manifest should declare one target, found {targets}")
modules = re.findall(r'\.product\(name:\s*"([^"]+)"', manifest)
(app / "Package.swift").write_text(manifest)
sources = app / "Sources" / targets[0]
sources.mkdir(parents=True)
(sources / "main.swift").write_text("// The snippets are compiled, never run.\n")
for number, group in enumerate(groups, 1):
    imports = group["imports"] or ["Foundation"] + modules
    text = [f"// {group['where']}, generated by scripts/docs/snippets.sh"]
    text += [f"import {name}" for name in imports]
    text += ["", f"func snippet{number}() async throws {{"]
    for path, line, code in group["parts"]:
        text.append(f'#sourceLocation(file: "{path}", line: {line})')
        text += code
        text.append("#sourceLocation()")
    text.append("}")
    (sources / f"Snippet{number}.swift").write_text("\n".join(text) + "\n")
print(f"[snippets] {len(groups)} snippets from {len(documents)} files; manifest from {manifests[0][0]}",
      file=sys.stderr)
print(targets[0])
PY
)
# The app takes this package's resolved versions when there are some, so the build needs no network.
if [ -f Package.resolved ]; then cp Package.resolved "$app/Package.resolved"; fi

build_log="$scratch/build.log"
status=0
if [ "$mode" = typecheck ]; then
    log "type-checking them as an app's code against this package's modules"
    swift build --product ManagedDocument > "$build_log" 2>&1 || { cat "$build_log" >&2; exit 1; }
    bin=$(swift build --show-bin-path)
    maps=()
    while IFS= read -r map; do
        maps+=(-Xcc "-fmodule-map-file=$map")
    done < <(scripts/docs/module-maps.sh "$bin")
    swiftc -typecheck -module-name SnippetApp -target "$(uname -m)-unknown-linux-gnu" -I "$bin/Modules" "${maps[@]}" \
        "$app/Sources/$target"/*.swift > "$build_log" 2>&1 || status=$?
    # > The app build's warnings of the library's own sources are not seen here: only the snippets are compiled.
else
    log "building them as an app that depends on this package (scratch: $scratch)"
    nice -n 5 swift build --package-path "$app" --scratch-path "$scratch" --product "$target" \
        --explicit-target-dependency-import-check error > "$build_log" 2>&1 || status=$?
fi
# The library's files as the repository names them, not through the link.
sed -i "s|$scratch/packages/ManagedDocument/|$root/|g" "$build_log"
# Diagnostics, once each: errors anywhere, warnings from the library's own sources (an app sees those on every clean
# build). Warnings in snippets (an unused value in an example) are shown but do not fail the check.
errors=$(grep -E '(^|/)[^ ]+:[0-9]+:[0-9]+: error:' "$build_log" | sort -u || true)
library_warnings=$(grep -E "/Sources/ManagedDocument/[^ ]+\.swift:[0-9]+:[0-9]+: warning:" "$build_log" | sort -u || true)
snippet_warnings=$(grep -E '\.md:[0-9]+:[0-9]+: warning:' "$build_log" | sort -u || true)
if [ -n "$snippet_warnings" ]; then
    log "warnings in snippets (not failures):"
    echo "$snippet_warnings" >&2
fi
if [ -n "$library_warnings" ]; then
    log "warnings from Sources/ManagedDocument, which every app depending on the package sees:"
    echo "$library_warnings" >&2
fi
if [ -n "$errors" ]; then
    log "errors:"
    echo "$errors" >&2
fi
if [ "$status" -ne 0 ] || [ -n "$errors" ] || [ -n "$library_warnings" ]; then
    [ -n "$errors" ] || tail -30 "$build_log" >&2
    log "the snippets do not build cleanly (full log: $build_log)"
    exit 1
fi
if [ "$mode" = typecheck ]; then
    log "every snippet type-checks as an app's code (scripts/docs/snippets.sh --app builds them as an outside app)"
else
    log "every snippet compiles in an outside package"
fi
