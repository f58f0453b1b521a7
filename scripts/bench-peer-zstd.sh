#!/usr/bin/env bash
# The open peer sqlite_zstd_rovfs (github.com/mlin/sqlite_zstd_rovfs: a read-only SQLite VFS over zstd's seekable
# format, contrib/seekable_format of facebook/zstd) on a given SQLite store: builds it (once), compresses the store the
# way its README does, and times reads through it from Python. Prints ONE line to stdout:
#
#   zstd_rovfs size=<bytes> compress_s=<s> point_us=<median> cold_us=<median|n/a> first_ms=<median> scan_ms=<median> rss_kib=<max> frame=<bytes>
#
#   scripts/bench-peer-zstd.sh STORE
#
# STORE is a SQLite store with a table item(id INTEGER PRIMARY KEY, kind INTEGER, body TEXT), ids 1..max (e.g. the one
# bench_item_store in scripts/bench-common.sh makes).
#
# Environment (all optional):
#   BENCH_QUERIES=1000                   point queries a round (random ids over 1..max(id))
#   BENCH_ROUNDS=3                       rounds; every figure is the median over rounds (rss_kib: the maximum)
#   BENCH_PEER_DIR=./bench-work/zstd-peer  where the peer's sources, build and compressed copy go (relative to the
#                                        repository root; git-ignored by default)
#   BENCH_PEER_FRAME=4096                frame size in bytes (the README's: 4 KiB, one SQLite page)
#   BENCH_PEER_THREADS=$(nproc)          compression threads (the README shows 4; its test uses the CPU count)
#   BENCH_PEER_ROVFS_GIT, BENCH_PEER_ZSTD_GIT
#                                        git directory or URL of mlin/sqlite_zstd_rovfs and facebook/zstd (default:
#                                        the local mirror under /work/.mirror when present, else GitHub)
#   BENCH_JOBS=2                         parallel build jobs
#   BENCH_DROP_CACHES=0                  no cold row (by default the page cache is dropped when it can be)
#   BENCH_KEEP=1                         keep the compressed copy afterwards
#
# Build (skipped when $BENCH_PEER_DIR/build holds both products), pinned to what the peer's CI tests
# (.github/workflows/test.yml: zstd v1.4.4 built from source; CMakeLists.txt fetches the same tag with FetchContent):
#   git archive of sqlite_zstd_rovfs 39478ba6 and of zstd v1.4.4 into $BENCH_PEER_DIR/src
#   make -C src/zstd-1.4.4/lib -j2 libzstd.a CFLAGS="-O3 -fPIC"      (static, linked into the .so; no system install)
#   cmake -S src/sqlite_zstd_rovfs -B build -DCMAKE_BUILD_TYPE=Release -DFETCHCONTENT_SOURCE_DIR_ZSTD=src/zstd-1.4.4
#         (+ -I/-L to that lib)  &&  cmake --build build -j2
#   products: build/zstd_seekable_compress (zstd's examples/parallel_compression.c, level 5), build/zstd_rovfs.so
#
# Compression, as in the README ("compress it (with 4 KiB frame size and 4 threads)"), once a run, input warm,
# wall time; the output is checked (count and total length of bodies) against the plain store:
#   build/zstd_seekable_compress STORE FRAME THREADS       (writes STORE.zst; here STORE is a symlink in the run folder)
#
# Reads, Debian's /usr/bin/python3 and its sqlite3 module, each case a fresh process that loads the extension
# (load_extension on a :memory: connection, as the README) and opens "file:STORE.zst?mode=ro&vfs=zstd_ro":
#   point_us   BENCH_QUERIES `SELECT body FROM item WHERE id = ?` on a fresh connection, page cache warm (the .zst read
#              with cat first); median of the per-query times (execute + fetchone) of the round. Ids: random.Random
#              seeded with the round, so reproducible; the same ids for the cold case of that round.
#   cold_us    the same after `sync; echo 3 > /proc/sys/vm/drop_caches` (n/a when that fails or is turned off)
#   first_ms   warm: from connect to the first query's row (one point query, schema read included)
#   scan_ms    warm: `SELECT count(*), sum(length(body)) FROM item`
#   rss_kib    ru_maxrss of the warm point-query process after its queries (the interpreter included), max of rounds
# Cases interleave round by round. Progress goes to stderr.
set -euo pipefail

[[ $# == 1 ]] || { sed -n '2,12p' "$0" >&2; exit 64; }
[[ -f $1 ]] || { echo "no such store: $1" >&2; exit 66; }
STORE=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

QUERIES=${BENCH_QUERIES:-1000}
ROUNDS=${BENCH_ROUNDS:-3}
PEER_DIR=${BENCH_PEER_DIR:-./bench-work/zstd-peer}
FRAME=${BENCH_PEER_FRAME:-4096}
THREADS=${BENCH_PEER_THREADS:-$(nproc)}
JOBS=${BENCH_JOBS:-2}
KEEP=${BENCH_KEEP:-0}
for value in "$QUERIES" "$ROUNDS" "$FRAME" "$THREADS" "$JOBS"; do
    [[ $value =~ ^[1-9][0-9]*$ ]] || {
        echo "BENCH_QUERIES, BENCH_ROUNDS, BENCH_PEER_FRAME, BENCH_PEER_THREADS and BENCH_JOBS must be positive integers" >&2
        exit 64
    }
done
PY=/usr/bin/python3
for tool in "$PY" git cmake make cc; do
    command -v "$tool" >/dev/null || { echo "missing: $tool (apt-get install -y python3 git cmake make gcc)" >&2; exit 69; }
done

source "$root/scripts/bench-common.sh"  # log, bench_page_cache, drop_caches

ROVFS_COMMIT=39478ba6f83d433c10e796c89c97da8db75e15dd  # mlin/sqlite_zstd_rovfs master, 2020-05-07
ZSTD_REF=v1.4.4                                         # the tag the peer's CMakeLists.txt and CI use
mirror_or_url() { if [[ -d $1 ]]; then echo "$1"; else echo "$2"; fi; }
ROVFS_GIT=${BENCH_PEER_ROVFS_GIT:-$(mirror_or_url /work/.mirror/mlin+sqlite_zstd_rovfs/repo/.git https://github.com/mlin/sqlite_zstd_rovfs.git)}
ZSTD_GIT=${BENCH_PEER_ZSTD_GIT:-$(mirror_or_url /work/.mirror/facebook+zstd/repo https://github.com/facebook/zstd.git)}

mkdir -p "$PEER_DIR"
PEER_DIR=$(cd "$PEER_DIR" && pwd)
SRC="$PEER_DIR/src"
BUILD="$PEER_DIR/build"
ZSTD_SRC="$SRC/zstd-1.4.4"
ROVFS_SRC="$SRC/sqlite_zstd_rovfs"
COMPRESS="$BUILD/zstd_seekable_compress"
EXTENSION="$BUILD/zstd_rovfs.so"

# unpack GIT REF FOLDER: the tree of REF from a local git directory or a URL, into FOLDER (made afresh).
unpack() {
    local git=$1 ref=$2 folder=$3
    rm -rf "$folder"
    mkdir -p "$folder"
    if [[ ! -d $git ]]; then
        local clone="$SRC/$(basename "$folder").git"
        [[ -d $clone ]] || git clone -q --bare --filter=blob:none "$git" "$clone" >&2
        git=$clone
    fi
    git --git-dir="$git" archive "$ref" | tar -x -C "$folder"
}

if [[ -x $COMPRESS && -f $EXTENSION ]]; then
    log "peer already built in $BUILD"
else
    log "building sqlite_zstd_rovfs ${ROVFS_COMMIT:0:8} with zstd $ZSTD_REF in $PEER_DIR"
    mkdir -p "$SRC"
    [[ -f $ROVFS_SRC/zstd_rovfs.c ]] || unpack "$ROVFS_GIT" "$ROVFS_COMMIT" "$ROVFS_SRC"
    [[ -f $ZSTD_SRC/contrib/seekable_format/zstd_seekable.h ]] || unpack "$ZSTD_GIT" "$ZSTD_REF" "$ZSTD_SRC"
    # static and position-independent, so that it links into the shared zstd_rovfs.so (and `-lzstd` finds it, not
    # a system libzstd of another version)
    make -C "$ZSTD_SRC/lib" -j"$JOBS" libzstd.a CFLAGS="-O3 -fPIC" >&2
    cmake -S "$ROVFS_SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF \
        -DFETCHCONTENT_FULLY_DISCONNECTED=ON -DFETCHCONTENT_SOURCE_DIR_ZSTD="$ZSTD_SRC" \
        -DCMAKE_C_FLAGS="-I$ZSTD_SRC/lib" \
        -DCMAKE_EXE_LINKER_FLAGS="-L$ZSTD_SRC/lib" -DCMAKE_SHARED_LINKER_FLAGS="-L$ZSTD_SRC/lib" >&2
    cmake --build "$BUILD" -j"$JOBS" >&2
    [[ -x $COMPRESS && -f $EXTENSION ]] || { echo "build did not produce $COMPRESS and $EXTENSION" >&2; exit 1; }
fi

# The run's folder: a symlink to the store (the compressor writes NAME.zst beside its input) and the .zst.
RUN="$PEER_DIR/run.$$"
rm -rf "$RUN"
mkdir -p "$RUN"
cleanup() { if [[ $KEEP == 1 ]]; then log "kept $RUN (BENCH_KEEP=1)"; else rm -rf "$RUN"; fi; }
trap cleanup EXIT
ln -s "$STORE" "$RUN/store.sqlite"
ZST="$RUN/store.sqlite.zst"

read -r MAX_ID PAGE_SIZE EXPECTED < <("$PY" - "$STORE" <<'EOF'
import sqlite3, sys
con = sqlite3.connect('file:%s?mode=ro' % sys.argv[1], uri=True)
max_id, = con.execute('SELECT max(id) FROM item').fetchone()
page_size, = con.execute('PRAGMA page_size').fetchone()
count, total = con.execute('SELECT count(*), sum(length(body)) FROM item').fetchone()
print(max_id, page_size, '%d:%d' % (count, total))
EOF
)
[[ $MAX_ID =~ ^[1-9][0-9]*$ ]] || { echo "$STORE: table item has no rows" >&2; exit 65; }
[[ $PAGE_SIZE == "$FRAME" ]] || log "note: the store's page size is $PAGE_SIZE, the frame size $FRAME"

log "compressing $STORE ($(stat -c %s "$STORE") bytes): zstd_seekable_compress FILE $FRAME $THREADS"
cat "$STORE" >/dev/null
start=$EPOCHREALTIME
"$COMPRESS" "$RUN/store.sqlite" "$FRAME" "$THREADS" >&2
end=$EPOCHREALTIME
COMPRESS_S=$("$PY" -c "print('%.2f' % ($end - $start))")
SIZE=$(stat -c %s "$ZST")
log "compressed to $SIZE bytes in $COMPRESS_S s"

# measure CASE ROUND: one fresh python process; prints its figures.
measure() {
    "$PY" - "$1" "$2" "$EXTENSION" "$ZST" "$MAX_ID" "$QUERIES" <<'EOF'
import random, resource, sqlite3, statistics, sys, time
case, round_, extension, zst, max_id, queries = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
loader = sqlite3.connect(':memory:')
loader.enable_load_extension(True)
loader.load_extension(extension)  # registers the vfs zstd_ro for the process (SQLITE_OK_LOAD_PERMANENTLY)
uri = 'file:%s?mode=ro&vfs=zstd_ro' % zst
rng = random.Random(round_)
if case in ('point', 'cold'):
    ids = [rng.randint(1, max_id) for _ in range(queries)]
    con = sqlite3.connect(uri, uri=True)
    times = []
    for i in ids:
        t = time.perf_counter()
        row = con.execute('SELECT body FROM item WHERE id = ?', (i,)).fetchone()
        times.append(time.perf_counter() - t)
        assert row is not None, i
    print('%.3f' % (statistics.median(times) * 1e6), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
elif case == 'first':
    i = rng.randint(1, max_id)
    t = time.perf_counter()
    con = sqlite3.connect(uri, uri=True)
    row = con.execute('SELECT body FROM item WHERE id = ?', (i,)).fetchone()
    print('%.3f' % ((time.perf_counter() - t) * 1e3))
    assert row is not None, i
elif case == 'scan':
    con = sqlite3.connect(uri, uri=True)
    t = time.perf_counter()
    count, total = con.execute('SELECT count(*), sum(length(body)) FROM item').fetchone()
    print('%.3f' % ((time.perf_counter() - t) * 1e3), '%d:%d' % (count, total))
EOF
}

bench_page_cache  # DROP=1 when the page cache can be dropped
[[ $DROP == 1 ]] || log "the page cache cannot be dropped (or BENCH_DROP_CACHES=0): no cold row"
point=() cold=() first=() scan=() rss=()
for round in $(seq 1 "$ROUNDS"); do
    cat "$ZST" >/dev/null
    out=$(measure point "$round")
    read -r us kib <<<"$out"
    point+=("$us") rss+=("$kib")
    cold_now=n/a
    if [[ $DROP == 1 ]]; then
        drop_caches
        out=$(measure cold "$round")
        read -r cold_now _ <<<"$out"
        cold+=("$cold_now")
    fi
    cat "$ZST" >/dev/null
    out=$(measure first "$round")
    first+=("$out")
    cat "$ZST" >/dev/null
    out=$(measure scan "$round")
    read -r ms got <<<"$out"
    [[ $got == "$EXPECTED" ]] || { echo "scan through the vfs gave $got, the store $EXPECTED" >&2; exit 1; }
    scan+=("$ms")
    log "round $round/$ROUNDS: point $us us, cold $cold_now us, first ${first[-1]} ms, scan $ms ms, rss $kib KiB"
done

med() { local digits=$1; shift; printf '%s\n' "$@" | "$PY" -c "import statistics, sys; print('%.${digits}f' % statistics.median(float(x) for x in sys.stdin.read().split()))"; }
cold_out=n/a
((${#cold[@]})) && cold_out=$(med 1 "${cold[@]}")
max_rss=$(printf '%s\n' "${rss[@]}" | sort -n | tail -n 1)
echo "zstd_rovfs size=$SIZE compress_s=$COMPRESS_S point_us=$(med 1 "${point[@]}") cold_us=$cold_out first_ms=$(med 2 "${first[@]}") scan_ms=$(med 1 "${scan[@]}") rss_kib=$max_rss frame=$FRAME"
