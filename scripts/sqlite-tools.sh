#!/usr/bin/env bash
# Installs the SQLite tools that open a document by its path through libmdzvfs (Datasette, sqlite-utils, pandas) into
# .build-tools/venv, a venv made from Debian's /usr/bin/python3: its sqlite3 module can load extensions, which many
# other pythons (pyenv's and python.org's builds by default) cannot. The versions are pinned in
# scripts/sqlite-tools.txt. Runs in about 20 s with PyPI reachable; does nothing when the venv already holds them.
#
#   scripts/sqlite-tools.sh            install (scripts/setup.sh calls it)
#   scripts/sqlite-tools.sh --python   print the venv's python (exit 1 when it is not installed)
#
# Exit 0 installed; 1 PyPI or pip failed (the tests that need the tools then skip and say why); 69 no
# /usr/bin/python3 with venv (apt-get install python3 python3-venv).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$root/.build-tools/venv"
pins="$root/scripts/sqlite-tools.txt"
stamp="$venv/.installed"

if [[ ${1:-} == --python ]]; then
    [[ -x $venv/bin/python && -f $stamp ]] || exit 1
    echo "$venv/bin/python"
    exit 0
fi
if [[ -f $stamp ]] && cmp -s "$stamp" "$pins"; then
    exit 0
fi
/usr/bin/python3 -c 'import venv, sqlite3; sqlite3.connect(":memory:").enable_load_extension(True)' 2>/dev/null || {
    echo "sqlite-tools: /usr/bin/python3 with venv and loadable SQLite extensions is needed (apt-get install python3 python3-venv)" >&2
    exit 69
}
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
/usr/bin/python3 -m venv "$venv"
if ! "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$pins"; then
    echo "sqlite-tools: pip could not install scripts/sqlite-tools.txt; the tests with Datasette, sqlite-utils and pandas will skip" >&2
    exit 1
fi
cp "$pins" "$stamp"
echo "sqlite-tools: Datasette, sqlite-utils and pandas in $venv"
