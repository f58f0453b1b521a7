#!/usr/bin/env bash
# Takes the picture of Datasette serving a document that the README shows (docs/images/datasette-table.png): converts
# the sample TasteB.sqlite into a document in a temporary folder, serves it by its path with
# `datasette serve TasteB.mdz --load-extension libmdzvfs.so:sqlite3_mdzvfs_default_init` on a free loopback port, and
# has headless Chromium photograph one table's page.
#
#   scripts/datasette-screenshot.sh [OUTPUT.png]
#
# Needs the built docconvert and libmdzvfs.so (`swift build`), the SQLite tools' venv (scripts/sqlite-tools.sh) and
# Debian's chromium (apt-get install chromium). Exit 0 with the picture written; 69 a tool is missing; 1 it failed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
output=${1:-$root/docs/images/datasette-table.png}
bin=$(cd "$root" && swift build --show-bin-path)
missing=()
[[ -x $bin/docconvert && -f $bin/libmdzvfs.so ]] || missing+=("docconvert and libmdzvfs.so (swift build)")
python=$("$root/scripts/sqlite-tools.sh" --python) || missing+=("the SQLite tools' venv (scripts/sqlite-tools.sh)")
command -v chromium >/dev/null || missing+=("chromium (apt-get install chromium)")
if [[ ${#missing[@]} -gt 0 ]]; then
    printf 'datasette-screenshot: missing: %s\n' "${missing[@]}" >&2
    exit 69
fi
work=$(mktemp -d)
server=""
cleanup() { [[ -n $server ]] && kill "$server" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
cp "$root/Samples/stores/TasteB.sqlite" "$work/"
"$bin/docconvert" convert "$work/TasteB.sqlite" --output "$work/TasteB.mdz" --legacy keep >/dev/null
port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$(dirname "$python")/datasette" serve "$work/TasteB.mdz" -h 127.0.0.1 -p "$port" \
    --load-extension "$bin/libmdzvfs.so:sqlite3_mdzvfs_default_init" >"$work/datasette.log" 2>&1 &
server=$!
for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$port/-/versions.json" >/dev/null && break
    sleep 0.2
done
curl -sf "http://127.0.0.1:$port/TasteB/ZDISH.json?_shape=array&_size=1" >/dev/null \
    || { cat "$work/datasette.log" >&2; echo "datasette-screenshot: datasette did not serve the document" >&2; exit 1; }
mkdir -p "$(dirname "$output")"
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,860 \
    --screenshot="$output" "http://127.0.0.1:$port/TasteB/ZDISH?_sort=Z_PK" >/dev/null 2>&1
[[ -s $output ]] || { echo "datasette-screenshot: chromium wrote no picture" >&2; exit 1; }
echo "datasette-screenshot: $output"
