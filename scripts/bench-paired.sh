#!/usr/bin/env bash
# Paired runs of two docconvert builds on the same inputs, alternating run by run, for the paths a change to the
# writer or the reader can move: conversion (three compressions), an incremental save (a one-row `migrate`) and a
# full scan read in place (`query`). Prints a Markdown table of medians and the ratio new/base per case.
#
#   scripts/bench-paired.sh BASE NEW
#
# BASE and NEW are docconvert binaries, or git revisions of this repository (built in release mode into
# .build-paired-REV, from a worktree under the work folder). Example: compare the commit before a change with HEAD:
#   scripts/bench-paired.sh HEAD~3 HEAD
#
# Environment (all optional):
#   BENCH_MB=256             size of the generated store in MiB (text rows of SQLite, compressible about 3:1)
#   BENCH_RUNS=5             rounds; each runs every case once with each binary, in alternating order
#   BENCH_DIR=./bench-work   work folder (relative to the repository root; git-ignored)
#   BENCH_KEEP=1             keep the work folder afterwards
#   BENCH_CASES="..."        cases to run (default: all): convert convert-d6 convert-store save save-full query
#
# Cases (each run on a fresh copy made before the timing starts; the page cache is left warm for both builds alike):
#   convert        docconvert convert SRC --output B --legacy keep               (deflate 2, ISA-L)
#   convert-d6     the same with --level 6 (zlib)
#   convert-store  the same with --compression store
#   save           docconvert migrate B --migrations M: open for writing, insert one row, save (incremental)
#   save-full      the same with a migration that changes every row (every page written: a full save)
#   query          docconvert query B "SELECT sum(length(body)) FROM note": every page read in place
# Timing: `/usr/bin/time -f '%e %M'` around each command (wall seconds, peak RSS in KiB).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
(( $# == 2 )) || { sed -n '2,10p' "$0" >&2; exit 64; }
MB=${BENCH_MB:-256}
RUNS=${BENCH_RUNS:-5}
DIR=${BENCH_DIR:-./bench-work}
KEEP=${BENCH_KEEP:-0}
for value in "$MB" "$RUNS"; do
    [[ $value =~ ^[1-9][0-9]*$ ]] || { echo "BENCH_MB and BENCH_RUNS must be positive integers" >&2; exit 64; }
done
log() { echo "[bench] $*" >&2; }

WORK="$DIR/paired"
rm -rf "$WORK"
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
cleanup() { [[ $KEEP == 1 ]] || rm -rf "$WORK"; git worktree prune 2>/dev/null || true; }
trap cleanup EXIT

# A binary as given, or one built from a revision in a worktree of its own.
binary_for() {
    local spec=$1
    if [[ -x $spec && -f $spec ]]; then (cd "$(dirname "$spec")" && echo "$PWD/$(basename "$spec")"); return; fi
    local rev
    rev=$(git rev-parse --short "$spec^{commit}") || { echo "neither a binary nor a revision: $spec" >&2; exit 64; }
    local tree="$WORK/tree-$rev" scratch="$root/.build-paired-$rev"
    git worktree add --detach "$tree" "$rev" >/dev/null 2>&1
    log "building $spec ($rev) in release mode into $scratch"
    (cd "$tree" && swift build -c release --product docconvert --scratch-path "$scratch" >&2)
    echo "$(cd "$tree" && swift build -c release --scratch-path "$scratch" --show-bin-path)/docconvert"
}
BASE=$(binary_for "$1")
NEW=$(binary_for "$2")

log "making a $MB MiB store"
python3 - "$WORK/store.sqlite" "$MB" <<'PY'
import random, sqlite3, sys
path, mb = sys.argv[1], int(sys.argv[2])
random.seed(7)
words = [''.join(random.choice('abcdefghijklmnopqrstuvwxyz') for _ in range(random.randint(3, 9))) for _ in range(4000)]
db = sqlite3.connect(path)
db.execute('PRAGMA journal_mode=DELETE')
db.execute('CREATE TABLE note(id INTEGER PRIMARY KEY, title TEXT, body TEXT, score REAL)')
target = mb << 20
row = 0
while True:
    rows = []
    for _ in range(2000):
        row += 1
        rows.append((row, ' '.join(random.choices(words, k=6)), ' '.join(random.choices(words, k=120)), random.random()))
    db.executemany('INSERT INTO note VALUES (?, ?, ?, ?)', rows)
    db.commit()
    if db.execute('PRAGMA page_count').fetchone()[0] * db.execute('PRAGMA page_size').fetchone()[0] >= target:
        break
db.close()
PY
mkdir -p "$WORK/migrations"
echo "INSERT INTO note(title, body, score) VALUES ('one row', 'added by the benchmark', 0.5);" \
    >"$WORK/migrations/V1__one_row.sql"
mkdir -p "$WORK/migrations-full"
echo "UPDATE note SET score = score + 1;" >"$WORK/migrations-full/V1__every_row.sql"
for which in base new; do
    binary=$BASE; [[ $which == new ]] && binary=$NEW
    cp "$WORK/store.sqlite" "$WORK/$which-source.sqlite"
    "$binary" convert "$WORK/$which-source.sqlite" --output "$WORK/$which.mdz" --legacy keep >/dev/null
    "$binary" verify "$WORK/$which.mdz" >/dev/null
done

# Each case prepares outside the timing and then runs one timed command; `timed` appends "seconds rss" to $RESULT.
timed() { /usr/bin/time -f '%e %M' -o "$WORK/time" "$@" >/dev/null 2>"$WORK/stderr" || { cat "$WORK/stderr" >&2; exit 1; }; cat "$WORK/time" >>"$RESULT"; }
fresh_source() { rm -f "$WORK/run.sqlite" "$WORK/run.mdz"; cp "$WORK/store.sqlite" "$WORK/run.sqlite"; }
case_convert() { fresh_source; timed "$1" convert "$WORK/run.sqlite" --output "$WORK/run.mdz" --legacy keep; }
case_convert-d6() { fresh_source; timed "$1" convert "$WORK/run.sqlite" --output "$WORK/run.mdz" --legacy keep --level 6; }
case_convert-store() { fresh_source; timed "$1" convert "$WORK/run.sqlite" --output "$WORK/run.mdz" --legacy keep --compression store; }
case_save() { rm -f "$WORK/run.mdz"; cp "$WORK/$2.mdz" "$WORK/run.mdz"; timed "$1" migrate "$WORK/run.mdz" --migrations "$WORK/migrations"; }
case_save-full() { rm -f "$WORK/run.mdz"; cp "$WORK/$2.mdz" "$WORK/run.mdz"; timed "$1" migrate "$WORK/run.mdz" --migrations "$WORK/migrations-full"; }
case_query() { timed "$1" query "$WORK/$2.mdz" "SELECT sum(length(body)) FROM note"; }
CASES=(${BENCH_CASES:-convert convert-d6 convert-store save save-full query})

for round in $(seq 1 "$RUNS"); do
    order=(base new); (( round % 2 == 0 )) && order=(new base)
    for id in "${CASES[@]}"; do
        for which in "${order[@]}"; do
            binary=$BASE; [[ $which == new ]] && binary=$NEW
            RESULT="$WORK/result-$id-$which"
            "case_$id" "$binary" "$which"
        done
    done
    log "round $round of $RUNS done"
done

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "Command: \`BENCH_MB=$MB BENCH_RUNS=$RUNS scripts/bench-paired.sh $1 $2\` ($(date -u +%Y-%m-%dT%H:%MZ), load $(cut -d' ' -f1-3 /proc/loadavg))"
echo
echo "| case | base, median s | new, median s | new / base | base peak RSS MiB | new peak RSS MiB |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
for id in "${CASES[@]}"; do
    b=$(cut -d' ' -f1 "$WORK/result-$id-base" | median); n=$(cut -d' ' -f1 "$WORK/result-$id-new" | median)
    br=$(cut -d' ' -f2 "$WORK/result-$id-base" | median); nr=$(cut -d' ' -f2 "$WORK/result-$id-new" | median)
    ratio=$(awk -v b="$b" -v n="$n" 'BEGIN { if (b > 0) printf "%.2f", n / b; else print "-" }')
    awk -v id="$id" -v b="$b" -v n="$n" -v r="$ratio" -v br="$br" -v nr="$nr" \
        'BEGIN { printf "| %s | %.2f | %.2f | %s | %.1f | %.1f |\n", id, b, n, r, br / 1024, nr / 1024 }'
done
echo
echo "Bundle sizes: base $(stat -c %s "$WORK/base.mdz") bytes, new $(stat -c %s "$WORK/new.mdz") bytes (convert, deflate 2)."
