#!/usr/bin/env bash
# Format version 3 against version 2 and the extracted store, at two store sizes, in the same run (issue "reading in
# place at the extracted file's speed, at any size"; docs/BENCHMARKS.md, "Format version 3"). For each size one store
# is made, converted into a version 2 and a version 3 bundle (`docconvert create`, `--format-version 3`) and
# extracted; then python reads all three through Debian's sqlite3 module (the bundles through libmdzvfs, default
# settings: no `segment_cache=`), and `docconvert query` reads both bundles through the library's read-only path.
#
#   scripts/bench-format3.sh
#
# Environment (all optional):
#   BENCH_SIZES="1024 16384"  store sizes in MiB (a 16 GiB run needs about 50 GB free and 40 minutes)
#   BENCH_QUERIES=1000        random point queries a pass
#   BENCH_ROUNDS=3            rounds of each case; the tables show medians
#   BENCH_DIR=./bench-work    work folder (relative to the repository root; git-ignored by default)
#   BENCH_KEEP=1              keep the bundles and the extracted stores afterwards
#   BENCH_DROP_CACHES=0       leave out the cold rows (by default the page cache is dropped for them when
#                             `echo 3 > /proc/sys/vm/drop_caches` works silently)
#   BENCH_PEER=1              also measure sqlite_zstd_rovfs on the same store (scripts/bench-peer-zstd.sh)
#
# Cases (one fresh python process each, the extension loaded first; ids random over the whole store, seeded):
#   point       BENCH_QUERIES point queries (`SELECT body FROM item WHERE id = ?`) on a fresh connection, page cache
#               warm: median per query. Bytes read from the file per query: /proc/self/io `rchar` over the pass.
#   point cold  the same with the page cache dropped first.
#   first       connect and the first point query's row, timed inside the process; and `docconvert query` of one
#               row, the whole process timed (start, open, query: the library's first query of a fresh process),
#               beside `docconvert --version` (the same process doing nothing: its floor).
#   scan        `SELECT count(*), sum(length(body)) FROM item` on a fresh connection, page cache warm.
#   RSS         the python process's peak resident set after the point queries (getrusage).
#   convert     `docconvert create` of the store, wall time (page cache warm), and the bundle's size.
# Progress goes to stderr; the report (Markdown) goes to stdout.
set -euo pipefail

invocation="$0${*:+ $*}"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

SIZES=${BENCH_SIZES:-1024 16384}
QUERIES=${BENCH_QUERIES:-1000}
ROUNDS=${BENCH_ROUNDS:-3}
DIR=${BENCH_DIR:-./bench-work}
KEEP=${BENCH_KEEP:-0}
PEER=${BENCH_PEER:-0}
PYTHON=/usr/bin/python3
for value in $SIZES "$QUERIES" "$ROUNDS"; do
    [[ $value =~ ^[1-9][0-9]*$ ]] || { echo "BENCH_SIZES, BENCH_QUERIES and BENCH_ROUNDS must be positive integers" >&2; exit 64; }
done
for tool in "$PYTHON" sqlite3 swift; do
    command -v "$tool" >/dev/null || { echo "missing: $tool" >&2; exit 69; }
done

source "$root/scripts/bench-common.sh"

echo "# Format version 3 benchmark"
echo
echo "Command: \`BENCH_SIZES=\"$SIZES\" BENCH_QUERIES=$QUERIES BENCH_ROUNDS=$ROUNDS $invocation\` (run in \`$root\`)"
echo

bench_release_tools

bench_work_folder format3-run
bench_page_cache

DRIVER="$WORK/driver.py"
cat >"$DRIVER" <<'EOF'
import random, resource, sqlite3, statistics, sys, time
mode, lib, uri, rows, queries, seed = sys.argv[1:7]
rows, queries, seed = int(rows), int(queries), int(seed)
def rchar():
    with open('/proc/self/io') as f:
        return next(int(line.split()[1]) for line in f if line.startswith('rchar:'))
loader = sqlite3.connect(':memory:'); loader.enable_load_extension(True); loader.load_extension(lib)
random.seed(seed)
if mode == 'first':
    start = time.perf_counter()
    con = sqlite3.connect(uri, uri=True)
    row = con.execute('SELECT body FROM item WHERE id = ?', (random.randint(1, rows),)).fetchone()
    assert row is not None
    print('%.2f' % ((time.perf_counter() - start) * 1000))
    sys.exit()
con = sqlite3.connect(uri, uri=True)
if mode == 'scan':
    start = time.perf_counter()
    con.execute('SELECT count(*), sum(length(body)) FROM item').fetchone()
    print('%.1f' % ((time.perf_counter() - start) * 1000))
    sys.exit()
ids = [random.randint(1, rows) for _ in range(queries)]
times = []
before = rchar()
for i in ids:
    start = time.perf_counter()
    row = con.execute('SELECT body FROM item WHERE id = ?', (i,)).fetchone()
    times.append((time.perf_counter() - start) * 1e6)
    assert row is not None
read = (rchar() - before) / queries
print('%.1f %.0f %d' % (statistics.median(times), read, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))
EOF

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) { print "n/a" } else if (NR % 2) { print v[(NR + 1) / 2] } else { printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 } }'; }
maximum() { sort -n | tail -1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0 || a == "n/a" || b == "n/a") print "n/a"; else printf "%.2f", a / b }'; }
verdict() { awk -v v="$1" -v t="$2" -v op="$3" 'BEGIN { if (v == "n/a") print "n/a"; else if (op == "le") print (v + 0 <= t + 0 ? "yes" : "no"); else print (v + 0 >= t + 0 ? "yes" : "no") }'; }
seconds_of() { local start=$1; awk -v a="$start" -v b="$(date +%s%N)" 'BEGIN { printf "%.2f", (b - a) / 1e9 }'; }

echo "Machine: $(nproc) cores, $(uname -sr), load at start $(cut -d' ' -f1-3 /proc/loadavg); SQLite $(sqlite3 --version | cut -d' ' -f1); $($PYTHON --version); release build. Medians of $ROUNDS rounds; $QUERIES random ids a pass."
echo

declare -A R   # R[size,case,measure]
for MB in $SIZES; do
    STORE="$WORK/source-$MB.sqlite"
    EXTRACTED="$WORK/extracted-$MB.sqlite"
    log "$MB MiB: making the store"
    bench_item_store "$STORE" "$MB"
    cat "$STORE" >/dev/null
    for version in 2 3; do
        doc="$WORK/v$version-$MB.mdz"
        start=$(date +%s%N)
        "$DOCCONVERT" create "$doc" --from "$STORE" --format-version "$version" >&2
        R[$MB,v$version,convert]=$(seconds_of "$start")
        R[$MB,v$version,size]=$(stat -c %s "$doc")
        log "$MB MiB: version $version bundle ${R[$MB,v$version,size]} bytes in ${R[$MB,v$version,convert]} s"
    done
    if [[ $PEER == 1 ]]; then
        log "$MB MiB: sqlite_zstd_rovfs on the same store"
        R[$MB,peer]=$(BENCH_QUERIES=$QUERIES BENCH_ROUNDS=$ROUNDS scripts/bench-peer-zstd.sh "$STORE" | tail -1)
        log "${R[$MB,peer]}"
    fi
    "$DOCCONVERT" extract "$WORK/v3-$MB.mdz" --output "$EXTRACTED" >&2
    rm -f "$STORE"
    ROWS=$(sqlite3 -readonly "$EXTRACTED" 'SELECT max(id) FROM item')
    R[$MB,bytes]=$(stat -c %s "$EXTRACTED")
    R[$MB,v2,segment]=$("$DOCCONVERT" inspect "$WORK/v2-$MB.mdz" --json | "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["metadata"]["store"]["segments"]["interval"])')
    R[$MB,v3,segment]=$("$DOCCONVERT" inspect "$WORK/v3-$MB.mdz" --json | "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["metadata"]["store"]["segments"]["interval"])')
    declare -A URI=([plain]="file:$EXTRACTED?mode=ro" [v2]="file:$WORK/v2-$MB.mdz?mode=ro&vfs=mdz"
                    [v3]="file:$WORK/v3-$MB.mdz?mode=ro&vfs=mdz")
    warm() { cat "$EXTRACTED" "$WORK/v2-$MB.mdz" "$WORK/v3-$MB.mdz" >/dev/null; }
    for case in plain v2 v3; do
        points=() reads=() rss=() colds=() firsts=() scans=() libs=()
        for round in $(seq 1 "$ROUNDS"); do
            warm
            read -r point read_bytes peak < <("$PYTHON" "$DRIVER" point "$LIB" "${URI[$case]}" "$ROWS" "$QUERIES" "$round")
            points+=("$point"); reads+=("$read_bytes"); rss+=("$peak")
            firsts+=("$("$PYTHON" "$DRIVER" first "$LIB" "${URI[$case]}" "$ROWS" 1 "$((round + 50))")")
            scans+=("$("$PYTHON" "$DRIVER" scan "$LIB" "${URI[$case]}" "$ROWS" 0 0)")
            if [[ $case == plain ]]; then
                start=$(date +%s%N)
                "$DOCCONVERT" --version >/dev/null
                libs+=("$(awk -v a="$start" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e6 }')")
            else
                start=$(date +%s%N)
                "$DOCCONVERT" query "$WORK/$case-$MB.mdz" "SELECT length(body) FROM item WHERE id = $((round * 7919 % ROWS + 1))" >/dev/null
                libs+=("$(awk -v a="$start" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e6 }')")
            fi
            if [[ $DROP == 1 ]]; then
                drop_caches
                read -r cold _ _ < <("$PYTHON" "$DRIVER" point "$LIB" "${URI[$case]}" "$ROWS" "$QUERIES" "$((round + 100))")
                colds+=("$cold")
            fi
        done
        R[$MB,$case,point]=$(printf '%s\n' "${points[@]}" | median)
        R[$MB,$case,read]=$(printf '%s\n' "${reads[@]}" | median)
        R[$MB,$case,rss]=$(printf '%s\n' "${rss[@]}" | maximum)
        R[$MB,$case,first]=$(printf '%s\n' "${firsts[@]}" | median)
        R[$MB,$case,scan]=$(printf '%s\n' "${scans[@]}" | median)
        R[$MB,$case,cold]=$(printf '%s\n' "${colds[@]+"${colds[@]}"}" | median)
        R[$MB,$case,library]=$(printf '%s\n' "${libs[@]+"${libs[@]}"}" | median)
        log "$MB MiB, $case: point ${R[$MB,$case,point]} us (${R[$MB,$case,read]} B read), cold ${R[$MB,$case,cold]} us, first ${R[$MB,$case,first]} ms, scan ${R[$MB,$case,scan]} ms, rss ${R[$MB,$case,rss]} KiB, library first ${R[$MB,$case,library]} ms"
    done
    if [[ $KEEP != 1 ]]; then rm -f "$EXTRACTED" "$WORK/v2-$MB.mdz" "$WORK/v3-$MB.mdz"; fi
done

for MB in $SIZES; do
    echo "## Store of $MB MiB (${R[$MB,bytes]} bytes): digest segments of ${R[$MB,v2,segment]} bytes in version 2, ${R[$MB,v3,segment]} in version 3"
    echo
    echo "| measure | extracted | version 2 | version 3 | v3 / extracted | v2 / extracted | target (v3) |"
    echo "| --- | ---: | ---: | ---: | ---: | ---: | --- |"
    p=$(ratio "${R[$MB,v3,point]}" "${R[$MB,plain,point]}")
    echo "| random point query, fresh connection, page cache warm, us | ${R[$MB,plain,point]} | ${R[$MB,v2,point]} | ${R[$MB,v3,point]} | $p | $(ratio "${R[$MB,v2,point]}" "${R[$MB,plain,point]}") | <= 3x: $(verdict "$p" 3 le) |"
    c=$(ratio "${R[$MB,v3,cold]}" "${R[$MB,plain,cold]}")
    echo "| the same, page cache dropped, us | ${R[$MB,plain,cold]} | ${R[$MB,v2,cold]} | ${R[$MB,v3,cold]} | $c | $(ratio "${R[$MB,v2,cold]}" "${R[$MB,plain,cold]}") | <= 2x: $(verdict "$c" 2 le) |"
    echo "| bytes read from the file per point query | ${R[$MB,plain,read]} | ${R[$MB,v2,read]} | ${R[$MB,v3,read]} | | | |"
    echo "| connect and first point query (python), ms | ${R[$MB,plain,first]} | ${R[$MB,v2,first]} | ${R[$MB,v3,first]} | | | <= 50 ms: $(verdict "${R[$MB,v3,first]}" 50 le) |"
    echo "| \`docconvert query\` of one row, whole process, ms (extracted column: \`docconvert --version\`, the process's floor) | ${R[$MB,plain,library]} | ${R[$MB,v2,library]} | ${R[$MB,v3,library]} | | | <= 50 ms: $(verdict "${R[$MB,v3,library]}" 50 le) |"
    s=$(ratio "${R[$MB,plain,scan]}" "${R[$MB,v3,scan]}")
    echo "| full scan, ms (speed as a fraction of the extracted store's in the ratio columns) | ${R[$MB,plain,scan]} | ${R[$MB,v2,scan]} | ${R[$MB,v3,scan]} | $s | $(ratio "${R[$MB,plain,scan]}" "${R[$MB,v2,scan]}") | >= 0.8x: $(verdict "$s" 0.8 ge) |"
    echo "| peak RSS of the python process, KiB | ${R[$MB,plain,rss]} | ${R[$MB,v2,rss]} | ${R[$MB,v3,rss]} | | | <= 64 MiB: $(verdict "${R[$MB,v3,rss]}" 65536 le) |"
    g=$(awk -v a="${R[$MB,v3,size]}" -v b="${R[$MB,v2,size]}" 'BEGIN { printf "%+.2f %%", (a / b - 1) * 100 }')
    echo "| bundle size, bytes | ${R[$MB,bytes]} | ${R[$MB,v2,size]} | ${R[$MB,v3,size]} | v3 vs v2: $g | | <= +3 % |"
    k=$(ratio "${R[$MB,v3,convert]}" "${R[$MB,v2,convert]}")
    echo "| \`docconvert create\`, s (one run) | | ${R[$MB,v2,convert]} | ${R[$MB,v3,convert]} | v3 / v2: $k | | <= 1.1x |"
    if [[ -n ${R[$MB,peer]:-} ]]; then
        echo
        echo "sqlite_zstd_rovfs on the same store: \`${R[$MB,peer]}\`"
    fi
    echo
done
set -- $SIZES
if [[ $# -ge 2 ]]; then
    small=$1 large=${!#}
    echo "Bytes read from the file per random point query, $large MiB against $small MiB: version 2 $(ratio "${R[$large,v2,read]}" "${R[$small,v2,read]}")x, version 3 $(ratio "${R[$large,v3,read]}" "${R[$small,v3,read]}")x (target for version 3: equal within 10 %)."
fi
