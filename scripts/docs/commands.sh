#!/usr/bin/env bash
# Checks that every command line in README.md's fenced ```sh blocks runs as written on the sample files, unless it
# is marked as illustrative.
#
#   scripts/docs/commands.sh [DOCCONVERT]
#                     run them; exit 0 when every one succeeded, 1 naming the README line that failed (with its
#                     output). DOCCONVERT is the binary to run as `docconvert` (default: the debug build, built
#                     when missing or stale)
#
# Illustrative, and not run:
#   - a block whose fence follows the line `<!-- commands: illustrative (WHY) -->` (root, Slurm, network, a long
#     build: say why in the parentheses);
#   - a line whose comment contains `illustrative`.
#
# The runnable blocks run in order, in one bash process (so a variable set in one line is there in the next), from
# a temporary folder holding a copy of Samples/stores at the same relative path (and the debug build of the SQLite
# extension where the README's release build would be, `.build/release/libmdzvfs.so`), with `docconvert` on PATH and
# TMPDIR and HOME inside the temporary folder; everything is removed afterwards. A line ending in `\` goes on to the next.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
log() { echo "[commands] $*" >&2; }

binary=${1:-}
if [ -z "$binary" ]; then
    swift build --product docconvert > /dev/null
    binary="$(swift build --show-bin-path)/docconvert"
fi
[ -x "$binary" ] || { log "no docconvert at $binary"; exit 66; }
binary=$(cd "$(dirname "$binary")" && pwd)/$(basename "$binary")
# The README loads the SQLite extension from `.build/release/libmdzvfs.so`: the debug build of it stands in there.
swift build --product mdzvfs > /dev/null
extension="$(swift build --show-bin-path)/libmdzvfs.so"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin" "$work/tmp" "$work/repository/Samples"
ln -s "$binary" "$work/bin/docconvert"
cp -R Samples/stores "$work/repository/Samples/stores"
mkdir -p "$work/repository/.build/release"
ln -s "$extension" "$work/repository/.build/release/libmdzvfs.so"

# The script: each runnable line, then a check of its status that names the README line.
python3 - "$root/README.md" > "$work/run.sh" <<'PY'
import re
import shlex
import sys

lines = open(sys.argv[1]).read().splitlines()
ILLUSTRATIVE_BLOCK = re.compile(r"^<!--\s*commands:\s*illustrative\b")
out = ['exec 3>&1 4>&2', 'output="$TMPDIR/.command-output"']
runnable = illustrative = 0
i = 0
while i < len(lines):
    if lines[i].strip() not in ("```sh", "```bash", "```shell"):
        i += 1
        continue
    j = i - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    skip_block = j >= 0 and ILLUSTRATIVE_BLOCK.match(lines[j].strip())
    i += 1
    while i < len(lines) and lines[i].strip() != "```":
        number, command = i + 1, lines[i]
        while command.endswith("\\") and i + 1 < len(lines):
            i += 1
            command = command[:-1] + "\n" + lines[i]
        i += 1
        if not command.strip() or command.lstrip().startswith("#"):
            continue
        # The comment of the line: what follows an unquoted ' #'.
        comment = ""
        try:
            lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
            lexer.commenters = ""
            tokens = list(lexer)
            if "#" in tokens:
                comment = " ".join(tokens[tokens.index("#"):])
        except ValueError:
            pass
        if skip_block or "illustrative" in comment:
            illustrative += 1
            continue
        runnable += 1
        shown = command.replace("\n", " ")
        out.append(f"{{ {command}\n}} > \"$output\" 2>&1")   # on its own line: the command may end in a comment
        out.append(f"status=$?; if [ $status -ne 0 ]; then echo {shlex.quote(f'README.md:{number}: ')}\"exit status $status: \"{shlex.quote(shown)} >&4; "
                   f"sed 's/^/    /' \"$output\" | tail -40 >&4; exit 1; fi")
        out.append(f"echo {shlex.quote(f'  ok  README.md:{number}: {shown}')} >&3")
    i += 1
out.append(f"echo {shlex.quote(f'{runnable} commands ran, {illustrative} illustrative')} >&3")
print("\n".join(out))
PY

log "running README.md's commands in $work/repository (docconvert: $binary)"
(cd "$work/repository" && PATH="$work/bin:$PATH" TMPDIR="$work/tmp" HOME="$work/tmp" bash "$work/run.sh") \
    || { log "a command of README.md failed (above); fix it, or mark it illustrative"; exit 1; }
log "every runnable command of README.md ran"
