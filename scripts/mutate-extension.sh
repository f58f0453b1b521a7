#!/usr/bin/env bash
# Mutated documents read through the mdzvfs SQLite extension by Debian's python, each in a process of its own: every
# mutant must be refused, or fail with an SQLite error while it is read, or give exactly the original's rows; a
# crash (a signal), a hang (60 s) or a different row is a failure.
#
#   scripts/mutate-extension.sh [COUNT] [SEED]     default: 600 mutants, seed 20261127
#
# The documents (made here with python's sqlite3 and `docconvert create`): a small store (served whole), a 6 MiB
# store deflated with restart points (several digest segments) and the same stored. A mutant is one of them with 1-4
# random bytes changed anywhere, 1-4 bytes changed in its last 4 KiB (the metadata and the zip directory), or the
# file cut short. Then the polyglot family of scripts/hostile/polyglot.py, made from the deflated document: each
# refused, failing while read, or serving exactly what zip tools read from the entry. The reader loads the extension, opens `file:MUTANT?vfs=mdz` and reads every table in rowid order.
# Prints a Markdown table of outcomes per document; exit 1 when anything failed (the mutants kept in the work
# folder, which is then not removed, and named).
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-600}
seed=${2:-20261127}
[[ $count =~ ^[1-9][0-9]*$ ]] || { echo "mutate-extension: COUNT must be a positive integer" >&2; exit 64; }
[[ $seed =~ ^[0-9]+$ ]] || { echo "mutate-extension: SEED must be a non-negative integer" >&2; exit 64; }
python=/usr/bin/python3
"$python" -c 'import sqlite3; sqlite3.connect(":memory:").enable_load_extension(True)' 2>/dev/null \
    || { echo "mutate-extension: $python's sqlite3 module cannot load extensions" >&2; exit 69; }

echo "mutate-extension: building libmdzvfs.so and docconvert (debug)" >&2
swift build --product mdzvfs >&2
swift build --product docconvert >&2
bin=$(swift build --show-bin-path)
work=$(mktemp -d)
keep=0
trap '[[ $keep == 1 ]] || rm -rf "$work"' EXIT

"$python" - "$work" <<'EOF'
import random, sqlite3, sys
folder = sys.argv[1]
random.seed(5)
for name, rows in (('small', 300), ('large', 12000)):
    con = sqlite3.connect('%s/%s.sqlite' % (folder, name))
    con.execute('CREATE TABLE item(id INTEGER PRIMARY KEY, body TEXT, payload BLOB)')
    con.execute('CREATE INDEX item_body ON item(body)')
    con.executemany('INSERT INTO item(body, payload) VALUES (?, ?)',
                    ((' '.join(random.choices(['alpha', 'bravo', 'charlie', 'delta'], k=60)), random.randbytes(300))
                     for _ in range(rows)))
    con.commit()
    con.close()
EOF
"$bin/docconvert" create "$work/small.mdz" --from "$work/small.sqlite" >/dev/null
"$bin/docconvert" create "$work/deflated.mdz" --from "$work/large.sqlite" >/dev/null
"$bin/docconvert" create "$work/stored.mdz" --from "$work/large.sqlite" --compression store >/dev/null

echo "mutate-extension: $count mutants, seed $seed" >&2
status=0
"$python" - "$bin/libmdzvfs.so" "$work" "$count" "$seed" <<'EOF' || status=$?
import collections, random, subprocess, sys
library, folder, count, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
reader = r'''
import hashlib, sqlite3, sys
loader = sqlite3.connect(':memory:'); loader.enable_load_extension(True); loader.load_extension(sys.argv[1])
try:
    con = sqlite3.connect('file:' + sys.argv[2] + '?vfs=mdz', uri=True)
    tables = con.execute("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name").fetchall()
except sqlite3.Error as error:
    print('refused'); sys.exit()
digest = hashlib.sha256()
try:
    for (name,) in tables:
        for row in con.execute('SELECT * FROM "%s" ORDER BY rowid' % name.replace('"', '""')):
            digest.update(repr(row).encode())
except sqlite3.Error as error:
    print('error while read'); sys.exit()
print('served ' + digest.hexdigest())
'''
def read(path):
    try:
        done = subprocess.run([sys.executable, '-c', reader, library, path], capture_output=True, text=True,
                              timeout=60)
    except subprocess.TimeoutExpired:
        return 'hang'
    if done.returncode != 0:
        return 'crash (status %d): %s' % (done.returncode, done.stderr.strip()[-200:])
    return done.stdout.strip()

random.seed(seed)
documents = ['small', 'deflated', 'stored']
originals = {name: open('%s/%s.mdz' % (folder, name), 'rb').read() for name in documents}
expected = {name: read('%s/%s.mdz' % (folder, name)) for name in documents}
for name, outcome in expected.items():
    assert outcome.startswith('served '), '%s: the original is not served: %s' % (name, outcome)
outcomes = collections.defaultdict(collections.Counter)
failures = []
for index in range(count):
    name = documents[index % len(documents)]
    data = bytearray(originals[name])
    kind = random.choice(['bytes anywhere', 'bytes in the last 4 KiB', 'cut short'])
    if kind == 'cut short':
        del data[random.randrange(1, len(data)):]
    else:
        for _ in range(random.randint(1, 4)):
            at = random.randrange(len(data)) if kind == 'bytes anywhere' else len(data) - random.randint(1, 4096)
            data[at] = random.randrange(256)
    path = '%s/mutant-%d.mdz' % (folder, index)
    open(path, 'wb').write(data)
    outcome = read(path)
    if outcome == expected[name]:
        outcome = 'served, same rows'
    elif outcome.startswith('served '):
        outcome = 'WRONG ROWS'
    outcomes[name][outcome.split(' (')[0] if outcome.startswith('crash') else outcome] += 1
    if outcome in ('WRONG ROWS', 'hang') or outcome.startswith('crash'):
        failures.append('%s (%s of %s): %s' % (path, kind, name, outcome))
    else:
        import os; os.remove(path)
# The polyglot family (scripts/hostile/polyglot.py): each must be refused or fail while read, or serve exactly the
# rows of what zip tools read from the entry (one-stream inflation), never the segment-wise store.
import json
made = subprocess.run([sys.executable, 'scripts/hostile/polyglot.py', '%s/deflated.mdz' % folder, folder],
                      capture_output=True, text=True, check=True)
for line in made.stdout.splitlines():
    polyglot = json.loads(line)
    outcome = read(polyglot['path'])
    if outcome.startswith('served '):
        seen = polyglot['zipToolsFile']
        plain = subprocess.run([sys.executable, '-c', reader.replace("+ '?vfs=mdz'", "+ '?mode=ro'"), library, seen],
                               capture_output=True, text=True).stdout.strip() if seen else ''
        outcome = 'served, what zip tools read' if plain == outcome else 'WRONG ROWS'
    key = 'polyglot family'
    outcomes[key][outcome.split(' (')[0] if outcome.startswith('crash') else outcome] += 1
    if outcome in ('WRONG ROWS', 'hang') or outcome.startswith('crash'):
        failures.append('%s (%s): %s' % (polyglot['path'], polyglot['note'], outcome))
documents.append('polyglot family')
originals['polyglot family'] = b''
columns = ['refused', 'error while read', 'served, same rows', 'served, what zip tools read', 'WRONG ROWS', 'crash', 'hang']
print('| document | mutants | ' + ' | '.join(columns) + ' |')
print('| --- | ---: | ' + ' | '.join('---:' for _ in columns) + ' |')
for name in documents:
    size = ' (%d bytes)' % len(originals[name]) if originals[name] else ''
    print('| %s%s | %d | %s |' % (name, size, sum(outcomes[name].values()),
                                          ' | '.join(str(outcomes[name][column]) for column in columns)))
for failure in failures:
    print('FAILED: ' + failure, file=sys.stderr)
sys.exit(1 if failures else 0)
EOF
if [[ $status != 0 ]]; then
    keep=1
    echo "mutate-extension: failures above; the mutants are kept in $work" >&2
    exit 1
fi
echo "mutate-extension: every mutant refused, failed with an SQLite error, or gave the original's rows" >&2
