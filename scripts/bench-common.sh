# Shared by the bench-*.sh scripts (sourced, not run): the log line, the work folder removed on exit, dropping
# the page cache between runs for cold-cache timings, and one timed run of a case.
#
#   bench_work_folder NAME   sets WORK to "$DIR/NAME" (made empty), and removes it on exit unless KEEP=1
#   bench_page_cache         sets DROP=1 when the page cache can be dropped (root, BENCH_DROP_CACHES not 0)
#   drop_caches              drops it (when DROP=1)
#   bench_release_tools      builds libmdzvfs.so and docconvert (release); sets BIN, LIB and DOCCONVERT
#   bench_item_store PATH MB a SQLite store of about MB MiB: table item(id, kind, body), rows of about 1 KiB of
#                            words (compressible as text is), the same rows for the same MB
#   run_case ID ROUND NAME [FOLDER]
#                            one timed run of the case ID (see below); sets TIMED
#
# The caller sets DIR (the benchmark folder) and KEEP before calling them.
#
# A case is a function, case_ID, that runs its one command through `timed` (never a string to eval):
#   case_zip-6() { timed zip -q -6 -j "$OUT" "$STORE"; }
# and the script lists its cases' IDs in an array, in the order they run and appear in its table.

log() { echo "[bench] $*" >&2; }

bench_release_tools() {
    log "building libmdzvfs.so and docconvert (release)"
    swift build -c release --product mdzvfs >&2
    swift build -c release --product docconvert >&2
    BIN=$(swift build -c release --show-bin-path)
    LIB="$BIN/libmdzvfs.so"
    DOCCONVERT="$BIN/docconvert"
}

bench_work_folder() {
    mkdir -p "$DIR"
    DIR=$(cd "$DIR" && pwd)
    WORK="$DIR/$1"  # everything the benchmark writes, removed at the end unless BENCH_KEEP=1
    rm -rf "$WORK"
    mkdir -p "$WORK"
    trap bench_cleanup EXIT
}

bench_cleanup() {
    if [[ $KEEP == 1 ]]; then
        log "kept $WORK (BENCH_KEEP=1)"
    else
        rm -rf "$WORK"
        rmdir "$DIR" 2>/dev/null || true
    fi
}

bench_page_cache() {
    DROP=0
    if [[ ${BENCH_DROP_CACHES:-1} != 0 ]] && (sync && echo 3 >/proc/sys/vm/drop_caches) 2>/dev/null; then
        DROP=1
    fi
}

drop_caches() {
    if [[ $DROP == 1 ]]; then sync; echo 3 >/proc/sys/vm/drop_caches; fi
}

# The fields /usr/bin/time writes for each run (a script may set more, e.g. '%e %M %U %S').
TIME_FORMAT='%e %M'

# timed COMMAND [ARG...]: runs COMMAND under /usr/bin/time, its fields written to $WORK/time.txt.
timed() { /usr/bin/time -f "$TIME_FORMAT" -o "$WORK/time.txt" "$@"; }

# run_case ID ROUND NAME [FOLDER]: drops the page cache (when DROP=1), then runs case_ID in a subshell in FOLDER (the
# current folder by default), its output in $WORK/cmd.out and $WORK/cmd.err. If it fails, says so with NAME and
# what it printed, and exits; otherwise TIMED holds the fields of the timing's last line, in TIME_FORMAT's order.
run_case() {
    local id=$1 round=$2 name=$3 folder=${4:-.}
    drop_caches
    rm -f "$WORK/time.txt"
    if ! (cd "$folder" && "case_$id") >"$WORK/cmd.out" 2>"$WORK/cmd.err"; then
        echo "FAILED: $name, round $round:" >&2
        cat "$WORK/cmd.out" "$WORK/cmd.err" "$WORK/time.txt" >&2 2>/dev/null || true
        exit 1
    fi
    read -r -a TIMED < <(tail -n 1 "$WORK/time.txt")
}

# bench_item_store PATH MB: the store the in-place reading benchmarks read (bench-extension, bench-segment-floor).
bench_item_store() {
    /usr/bin/python3 - "$1" "$2" <<'EOF'
import random, sqlite3, sys
path, megabytes = sys.argv[1], int(sys.argv[2])
random.seed(7)
words = ['%s%d' % (w, i) for i, w in enumerate('alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo'.split() * 40)]
con = sqlite3.connect(path)
con.execute('PRAGMA journal_mode = OFF')
con.execute('PRAGMA synchronous = OFF')
con.execute('CREATE TABLE item(id INTEGER PRIMARY KEY, kind INTEGER, body TEXT)')
rows = megabytes * 1024 * 1024 // 1100
for start in range(0, rows, 10000):
    con.executemany('INSERT INTO item(kind, body) VALUES (?, ?)',
                    ((random.randrange(100), ' '.join(random.choices(words, k=150))[:1000])
                     for _ in range(min(10000, rows - start))))
con.commit()
con.close()
EOF
}
