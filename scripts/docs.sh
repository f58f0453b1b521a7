#!/usr/bin/env bash
# Builds the documentation and checks it; installs the man page and shell completions.
#
#   scripts/docs.sh            # check: docs/CLI.md's example outputs are the binary's (scripts/docs/examples.py),
#                              # README.md, CHANGELOG.md, docs/CLI.md and docs/FORMAT.md name the version of
#                              # Sources/MDZCore/Version.swift and README.md lists the packages
#                              # scripts/setup.sh installs (scripts/docs/consistency.py); no layer of the library
#                              # reaches upward (scripts/docs/layers.py), every file and type the Architecture
#                              # article names exists (scripts/docs/architecture.py), no function in Sources/, Tests/,
#                              # Samples/ or Fuzz/ over 80 lines (scripts/docs/function-length.py), the DocC
#                              # catalog builds with warnings as errors, every public symbol of the library has a
#                              # doc comment, every Swift snippet of README.md and the DocC articles type-checks as
#                              # an app's code (scripts/docs/snippets.sh; --app builds them in an outside package),
#                              # every command of README.md runs as
#                              # written or is marked illustrative (scripts/docs/commands.sh), the man page
#                              # generates (CI runs this)
#   scripts/docs.sh manual     # only the man page, .build/docs/docconvert.1 (builds docconvert and generate-manual)
#   scripts/docs.sh install [PREFIX]
#                              # build docconvert (release), install it, its man page and its bash, zsh and fish
#                              # completions under PREFIX (default /usr/local)
#
# Outputs: .build/docs/ManagedDocument.doccarchive (open it with `docc preview`, or serve its folder), and
# .build/docs/docconvert.1 (read it with `man -l .build/docs/docconvert.1`).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
out="$root/.build/docs"
mkdir -p "$out"
log() { echo "[docs] $*" >&2; }

# The man page of one docconvert binary (default: the debug build), made by swift-argument-parser's generate-manual
# tool; only docconvert and that tool are built (the generate-manual plugin would build every product in release).
# Its EXIT STATUS section is the list of statuses every command uses, instead of the tool's ">0 if an error occurs".
manual() {
    local binary=${1:-}
    log "generating the man page (swift-argument-parser's generate-manual)"
    swift build --product generate-manual > "$out/manual.log" 2>&1 || { cat "$out/manual.log" >&2; return 1; }
    if [ -z "$binary" ]; then
        swift build --product docconvert >> "$out/manual.log" 2>&1 || { cat "$out/manual.log" >&2; return 1; }
        binary="$(swift build --show-bin-path)/docconvert"
    fi
    rm -rf "$out/manual" && mkdir -p "$out/manual"
    "$(swift build --show-bin-path)/generate-manual" "$binary" --output-directory "$out/manual" >> "$out/manual.log" 2>&1 \
        || { cat "$out/manual.log" >&2; return 1; }
    python3 - "$out/manual/docconvert.1" "$out/docconvert.1" <<'PY'
import sys
text = open(sys.argv[1]).read()
statuses = [
    ("0", "Success."),
    ("1", "merge-reports only: the tree is not finished (a shard is missing, was interrupted or killed, or items failed or were busy)."),
    ("64", "A usage error: a bad option or argument, or SQL that query refuses."),
    ("65", "The input is damaged, hostile or not what the command takes (not a bundle, not a regular file, not a legacy store); a migration failed or disagrees with a document; batch: an item failed; merge-reports: the reports disagree."),
    ("66", "An input does not exist."),
    ("73", "An output cannot be created or already exists."),
    ("74", "An I/O error."),
    ("75", "The document or store is in use or busy."),
]
items = "".join(f".It {code}\n{meaning}\n" for code, meaning in statuses)
standard = '.Sh "EXIT STATUS"\n.Ex -std'
if standard not in text:
    sys.exit("[docs] the generated man page has no standard EXIT STATUS section to replace")
text = text.replace(standard, '.Sh "EXIT STATUS"\n.Bl -tag -width Ds\n' + items + ".El")
open(sys.argv[2], "w").write(text)
PY
    grep -q '^\.Sh NAME' "$out/docconvert.1" || { log "docconvert.1 has no NAME section"; return 1; }
    for command in convert create inspect verify extract migrate batch merge-reports query; do
        grep -q "$command" "$out/docconvert.1" || { log "docconvert.1 does not mention '$command'"; return 1; }
    done
}

check() {
    log "building the DocC catalog with warnings as errors"
    rm -rf "$out/ManagedDocument.doccarchive"
    # > The library's symbol graph with the core it re-exports (scripts/docs/symbol-graph.sh says why not the plugin's).
    scripts/docs/symbol-graph.sh "$out/symbol-graphs" > "$out/symbols.log" 2>&1 || { cat "$out/symbols.log" >&2; return 1; }
    if ! docc convert Sources/ManagedDocument/ManagedDocument.docc --additional-symbol-graph-dir "$out/symbol-graphs" \
        --fallback-display-name ManagedDocument --fallback-bundle-identifier ManagedDocument \
        --output-path "$out/ManagedDocument.doccarchive" --warnings-as-errors > "$out/docc.log" 2>&1; then
        grep -E "error|warning" "$out/docc.log" >&2 || tail -20 "$out/docc.log" >&2
        log "the DocC catalog does not build cleanly (full log: $out/docc.log)"
        return 1
    fi
    log "checking that every public symbol has a doc comment"
    python3 scripts/docs/undocumented.py "$out/symbol-graphs/ManagedDocument.symbols.json"
    log "checking that no layer of the library reaches upward"
    python3 scripts/docs/layers.py
    log "checking that every file and type the Architecture article names exists"
    python3 scripts/docs/architecture.py
    log "checking that no function in Sources/, Tests/, Samples/ or Fuzz/ is over 80 lines"
    python3 scripts/docs/function-length.py
    log "running the commands of README.md"
    scripts/docs/commands.sh
    log "comparing docs/CLI.md's example outputs with the binary's"
    python3 scripts/docs/examples.py "$(swift build --show-bin-path)/docconvert"
    log "checking the version and the installed packages the documents name"
    python3 scripts/docs/consistency.py
    log "type-checking the Swift snippets of README.md and the DocC articles as an app's code"
    scripts/docs/snippets.sh
    manual
    log "documentation checks passed: $out"
}

install_all() {
    local prefix=${1:-/usr/local}
    log "building docconvert (release, the Swift runtime linked in, stripped: the way it ships)"
    swift build -c release --static-swift-stdlib -Xlinker -s --product docconvert >&2
    local binary
    binary="$(swift build -c release --show-bin-path)/docconvert"
    manual "$binary"
    install -d "$prefix/bin" "$prefix/share/man/man1" "$prefix/share/bash-completion/completions" \
        "$prefix/share/zsh/site-functions" "$prefix/share/fish/vendor_completions.d"
    install -m 755 "$binary" "$prefix/bin/docconvert"
    install -m 644 "$out/docconvert.1" "$prefix/share/man/man1/docconvert.1"
    "$binary" --generate-completion-script bash > "$prefix/share/bash-completion/completions/docconvert"
    "$binary" --generate-completion-script zsh > "$prefix/share/zsh/site-functions/_docconvert"
    "$binary" --generate-completion-script fish > "$prefix/share/fish/vendor_completions.d/docconvert.fish"
    log "installed $prefix/bin/docconvert, its man page (man docconvert) and bash, zsh and fish completions"
}

case ${1:-check} in
    check) check ;;
    install) install_all "${2:-}" ;;
    manual) manual ;;
    *) echo "usage: scripts/docs.sh [check | install [PREFIX] | manual]" >&2; exit 64 ;;
esac
