#!/usr/bin/env bash
# Converts a tree of small SQLite stores into zip bundles with `docconvert batch` and with the peers an operator would
# otherwise use, on copies of the same tree in the same run, and prints a Markdown table of medians.
#
#   scripts/bench-batch.sh
#
# Environment (all optional):
#   BENCH_STORES=2000        number of generated stores (16-256 KiB each)
#   BENCH_TREE=issue         the tree's shape: `issue` (the batch issue's: 40 folders, a third of the stores with
#                            their rows only in a `-wal`, left as a writer killed before its checkpoint leaves it)
#                            or `nested` (210 nested folders, every store in rollback-journal mode: the shape of
#                            the tables before 2026-11-26)
#   BENCH_FS=journal         run every case on an ext4 file system with a journal, made for the run in a file and
#                            loop-mounted (root only); by default the cases run where BENCH_DIR is
#   BENCH_RUNS=3             timed runs per case; the table shows medians
#   BENCH_JOBS=2             workers for docconvert, xargs -P and the python pool
#   BENCH_DIR=./bench-work   work folder (relative to the repository root; git-ignored)
#   BENCH_KEEP=1             keep the work folder afterwards
#   BENCH_LEGACY=keep        --legacy for the docconvert cases: keep (default), or backup to time the disposal
#                            too (the store moved into docconvert-backup/ under its lock, after the check of the
#                            processes that have it open)
#   BENCH_CASES="..."        cases to run (default: all): ours ours-d6 ours-store shell xargs python copy
#   BENCH_STATIC_STDLIB=0    build docconvert with the Swift runtime and Foundation as shared libraries (by default
#                            it is built with --static-swift-stdlib, the way it ships)
#   BENCH_SCRATCH=PATH       the build's scratch folder (default: .build-batchbench-static, or .build with
#                            BENCH_STATIC_STDLIB=0), so that the benchmark's build does not collide with another one
#   BENCH_BIN=PATH           a docconvert binary already built: nothing is built
#   BENCH_BASE_BIN=PATH      another docconvert (e.g. main's, built into another scratch folder) for the `base` case,
#                            run alternately with `ours` in every round: a before/after comparison paired in time
#   BENCH_SYSCALLS=0         skip the system-call count (by default one more run of `ours`, and of `base` when it
#                            is among the cases, under `strace -c -f` when strace is installed; not timed)
#
# Cases, each on a fresh copy of the tree (copied before the timing starts, page cache left warm for all):
#   ours        docconvert batch ROOT --jobs J --legacy keep --quiet        (consolidate, verify, deflate at the default
#               level 2 with ISA-L, fsync, rename)
#   base        the same with BENCH_BASE_BIN (only when it is set)
#   ours-d6     the same with --level 6 (zlib's level 6, the level the peers use)
#   ours-store  the same with --compression store
#   shell       for each store: sqlite3 .backup to a temporary file, zip -q -6 it, rm     (one at a time)
#   xargs       the same per store through xargs -P J
#   python      python3 multiprocessing.Pool(J): sqlite3 backup, zipfile deflate 6, fsync, os.replace
#   copy        python3 multiprocessing.Pool(J): copy each store and its -wal to NAME.copy with fsync and
#               os.replace, then fsync the folder: the floor for any converter that writes a durable new file per
#               store (the batch issue's "durable copy")
#
# Timing: `/usr/bin/time -f '%e %M'` around each command: wall seconds and peak RSS in KiB (for the pool and xargs
# cases that is the largest single process, as getrusage reports children). Rounds are interleaved.
set -euo pipefail

invocation="$0${*:+ $*}"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

STORES=${BENCH_STORES:-2000}
RUNS=${BENCH_RUNS:-3}
JOBS=${BENCH_JOBS:-2}
DIR=${BENCH_DIR:-./bench-work}
KEEP=${BENCH_KEEP:-0}
CASES=${BENCH_CASES:-"ours ours-d6 ours-store shell xargs python copy"}
STATIC=${BENCH_STATIC_STDLIB:-1}
SHAPE=${BENCH_TREE:-issue}
FS=${BENCH_FS:-}
LEGACY=${BENCH_LEGACY:-keep}
[[ $LEGACY == keep || $LEGACY == backup ]] || { echo "BENCH_LEGACY must be keep or backup" >&2; exit 64; }
[[ $SHAPE == issue || $SHAPE == nested ]] || { echo "BENCH_TREE must be issue or nested" >&2; exit 64; }
[[ -z $FS || $FS == journal ]] || { echo "BENCH_FS must be journal (or unset)" >&2; exit 64; }
[[ $STORES =~ ^[1-9][0-9]*$ ]] || { echo "BENCH_STORES must be a positive integer" >&2; exit 64; }
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || { echo "BENCH_RUNS must be a positive integer" >&2; exit 64; }
[[ $JOBS =~ ^[1-9][0-9]*$ ]] || { echo "BENCH_JOBS must be a positive integer" >&2; exit 64; }
for tool in python3 zip sqlite3 xargs /usr/bin/time swift; do
    command -v "$tool" >/dev/null || { echo "missing: $tool (scripts/setup.sh installs it)" >&2; exit 69; }
done

source "$root/scripts/bench-common.sh"

if [[ -n ${BENCH_BIN:-} ]]; then
    BIN=$(cd "$(dirname "$BENCH_BIN")" && pwd)/$(basename "$BENCH_BIN")
    [[ -x $BIN ]] || { echo "BENCH_BIN: no executable at $BENCH_BIN" >&2; exit 66; }
    log "using $BIN (BENCH_BIN; not built)"
else
    build_flags=()
    if [[ $STATIC == 1 ]]; then
        build_flags=(--static-swift-stdlib --scratch-path "${BENCH_SCRATCH:-$root/.build-batchbench-static}")
    elif [[ -n ${BENCH_SCRATCH:-} ]]; then
        build_flags=(--scratch-path "$BENCH_SCRATCH")
    fi
    log "building docconvert (release${build_flags[*]:+, ${build_flags[*]}})"
    swift build -c release --product docconvert "${build_flags[@]}" >&2
    BIN="$(swift build -c release "${build_flags[@]}" --show-bin-path)/docconvert"
fi
BASE_BIN=${BENCH_BASE_BIN:-}
if [[ -n $BASE_BIN ]]; then
    BASE_BIN=$(cd "$(dirname "$BASE_BIN")" && pwd)/$(basename "$BASE_BIN")
    [[ -x $BASE_BIN ]] || { echo "BENCH_BASE_BIN: no executable at $BENCH_BASE_BIN" >&2; exit 66; }
fi

# --- work folder and cleanup (scripts/bench-common.sh); the page cache stays warm for every case ------------------
bench_work_folder batch
DROP=0
if [[ $FS == journal ]]; then
    # > An ext4 with a journal, as most servers have: without one (this machine's root file system), ext4 steps
    # > over every inode freed in the last minutes when it allocates one, and a benchmark deletes thousands.
    [[ $(id -u) == 0 ]] || { echo "BENCH_FS=journal needs root (mount)" >&2; exit 77; }
    truncate -s $((STORES * 4 / 10 + 2048))M "$WORK/fs.img"
    mkfs.ext4 -q -F "$WORK/fs.img"
    mkdir -p "$WORK/fs"
    mount -o loop "$WORK/fs.img" "$WORK/fs"
    trap 'umount "$WORK/fs" 2>/dev/null || true; bench_cleanup' EXIT
    log "cases run on a journaled ext4 mounted at $WORK/fs"
fi
RUNS_IN=${FS:+$WORK/fs}
RUNS_IN=${RUNS_IN:-$WORK}

# --- the tree -------------------------------------------------------------------------------------------------------
TREE="$WORK/tree"
log "generating $STORES stores of 16-256 KiB ($SHAPE tree)"
python3 - "$TREE" "$STORES" "$SHAPE" <<'PY'
import os, random, sqlite3, sys
root, count, shape = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rng = random.Random(2026)
words = [''.join(rng.choice('abcdefghijklmnopqrstuvwxyz') for _ in range(rng.randint(3, 9))) for _ in range(2000)]
for index in range(count):
    if shape == "nested":
        # 3 levels: 10 top folders, 10 below each, stores in the leaves (and some one level up).
        folder = os.path.join(root, f"user{index % 10:02d}", f"app{(index // 10) % 10}",
                              *(["Library"] if index % 3 else []))
    else:
        folder = os.path.join(root, f"user{index % 10:02d}", f"app{(index // 10) % 4}")  # 40 folders
    os.makedirs(folder, exist_ok=True)
    name = f"store{index:05d}" + [".sqlite", ".db", ".sqlite3", ".store"][index % 4]  # odd extensions
    path = os.path.join(folder, name)
    target = rng.randint(16, 256) * 1024
    rows, size = [], 8192
    while size < target:
        body = ' '.join(rng.choice(words) for _ in range(rng.randint(10, 60)))
        blob = rng.randbytes(rng.randint(0, 300))
        rows.append((len(rows), body[:30], body, blob, 7e8 + len(rows)))
        size += len(body) + len(blob) + 40
    # > A third of the issue's stores have their rows only in the -wal: written by a child that exits without
    # > closing (SQLite checkpoints and removes the -wal at the last close).
    wal = shape == "issue" and index % 3 == 0
    if wal and os.fork():
        _, status = os.wait()
        if status != 0:
            sys.exit("a writer failed")
        continue
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=%s" % ("WAL" if wal else "DELETE"))
    db.execute("PRAGMA wal_autocheckpoint=0")
    db.execute("CREATE TABLE ZENTRY (Z_PK INTEGER PRIMARY KEY, ZTITLE VARCHAR, ZBODY VARCHAR, ZDATA BLOB, ZDATE TIMESTAMP)")
    with db:
        db.executemany("INSERT INTO ZENTRY VALUES (?,?,?,?,?)", rows)
    if wal:
        os._exit(0)
    db.close()
PY
TOTAL_BYTES=$(du -sb "$TREE" | cut -f1)
log "tree: $STORES stores, $((TOTAL_BYTES / 1048576)) MiB"

# --- the peers --------------------------------------------------------------------------------------------------------
cat > "$WORK/one.sh" <<'SH'
#!/usr/bin/env bash
# One store the shell way: consolidate with sqlite3's online backup, zip it, remove the temporary.
set -e
f=$1
sqlite3 "$f" ".backup '$f.bak'"
zip -q -6 -j "${f%.*}.zip" "$f.bak"
rm -f "$f.bak"
SH
chmod +x "$WORK/one.sh"
cat > "$WORK/pool.py" <<'PY'
import multiprocessing, os, sqlite3, sys, zipfile

def convert(path):
    """sqlite3 backup into a temporary, zip it (deflate 6), fsync, rename into place: a careful script's converter."""
    base = os.path.splitext(path)[0]
    copy, temp, final = path + ".bak", base + ".zip.tmp", base + ".zip"
    source = sqlite3.connect(path)
    target = sqlite3.connect(copy)
    source.backup(target)
    target.close(); source.close()
    with zipfile.ZipFile(temp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as archive:
        archive.write(copy, "persistentStore")
    with open(temp, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(temp, final)
    os.remove(copy)

def copy(path):
    """The floor: a durable copy of each store and its -wal (read, write, fsync, rename), then its folder flushed."""
    for name in (path, path + "-wal"):
        if name != path and not os.path.exists(name):
            continue
        temp, final = name + ".copy.tmp", name + ".copy"
        with open(name, "rb") as source, open(temp, "wb") as target:
            target.write(source.read())
            target.flush()
            os.fsync(target.fileno())
        os.replace(temp, final)
    folder = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)

if __name__ == "__main__":
    mode, root, jobs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    paths = []
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as handle:
                if handle.read(16) == b"SQLite format 3\0":
                    paths.append(path)
    with multiprocessing.Pool(jobs) as pool:
        pool.map(convert if mode == "convert" else copy, paths, chunksize=8)
PY

# --- cases: each a function run by run_case (scripts/bench-common.sh) on $RUN_TREE, a fresh copy of the tree -------
FIND_STORES='find "$1" -type f \( -name "*.sqlite" -o -name "*.db" -o -name "*.sqlite3" -o -name "*.store" \) -print0'
case_ours() { timed "$BIN" batch "$RUN_TREE" --jobs "$JOBS" --legacy "$LEGACY" --quiet; }
case_base() { timed "$BASE_BIN" batch "$RUN_TREE" --jobs "$JOBS" --legacy "$LEGACY" --quiet; }
case_ours-d6() { timed "$BIN" batch "$RUN_TREE" --jobs "$JOBS" --legacy "$LEGACY" --quiet --level 6; }
case_ours-store() { timed "$BIN" batch "$RUN_TREE" --jobs "$JOBS" --legacy "$LEGACY" --quiet --compression store; }
case_shell() { timed bash -c "$FIND_STORES"' | while IFS= read -r -d "" f; do "$2" "$f"; done' _ "$RUN_TREE" "$WORK/one.sh"; }
case_xargs() { timed bash -c "$FIND_STORES"' | xargs -0 -n 1 -P "$3" "$2"' _ "$RUN_TREE" "$WORK/one.sh" "$JOBS"; }
case_python() { timed python3 "$WORK/pool.py" convert "$RUN_TREE" "$JOBS"; }
case_copy() { timed python3 "$WORK/pool.py" copy "$RUN_TREE" "$JOBS"; }
for name in $CASES; do
    declare -F "case_$name" >/dev/null || { echo "unknown case $name" >&2; exit 64; }
    [[ $name != base || -n $BASE_BIN ]] || { echo "the base case needs BENCH_BASE_BIN" >&2; exit 64; }
done

declare -A times rss outs
for round in $(seq 1 "$RUNS"); do
    for name in $CASES; do
        copy="$RUNS_IN/run-$name"
        rm -rf "$copy"
        cp -a "$TREE" "$copy"
        sync
        log "round $round: $name"
        RUN_TREE=$copy
        run_case "$name" "$round" "$name"
        seconds=${TIMED[0]} kib=${TIMED[1]}
        times[$name]+="$seconds "
        rss[$name]+="$kib "
        case $name in
            ours|ours-d6|ours-store|base)
                made=$(find "$copy" -name '*.mdz' | wc -l)
                if [[ $round == 1 && $name == ours ]]; then
                    # Lossless check on a sample of bundles: same rows as sqlite3 reads from the source.
                    for bundle in $(find "$copy" -name '*.mdz' | sort | head -5); do
                        source=$(ls "${bundle%.mdz}".* | grep -v '\.mdz$' | head -1 || true)
                        if [[ -z $source ]]; then  # BENCH_LEGACY=backup: the store is in its backup folder
                            stem=$(basename "${bundle%.mdz}")
                            source=$(ls "$(dirname "$bundle")/docconvert-backup/$stem".*/"$stem".* \
                                | grep -v -e '-wal$' -e '-shm$' -e '-journal$' | head -1)
                        fi
                        "$BIN" extract "$bundle" --output "$WORK/check.sqlite" >/dev/null
                        a=$(sqlite3 "$source" "SELECT count(*), sum(length(ZBODY)), hex(sha3(group_concat(hex(ZDATA)))) FROM ZENTRY" 2>/dev/null \
                            || sqlite3 "$source" "SELECT count(*), sum(length(ZBODY)), sum(length(ZDATA)) FROM ZENTRY")
                        b=$(sqlite3 "$WORK/check.sqlite" "SELECT count(*), sum(length(ZBODY)), hex(sha3(group_concat(hex(ZDATA)))) FROM ZENTRY" 2>/dev/null \
                            || sqlite3 "$WORK/check.sqlite" "SELECT count(*), sum(length(ZBODY)), sum(length(ZDATA)) FROM ZENTRY")
                        rm -f "$WORK/check.sqlite"
                        [[ $a == "$b" ]] || { echo "bundle $bundle differs from its source ($a vs $b)" >&2; exit 1; }
                    done
                fi
                ;;
            copy) made=$(find "$copy" -name '*.copy' ! -name '*-wal.copy' | wc -l) ;;
            *) made=$(find "$copy" -name '*.zip' | wc -l) ;;
        esac
        [[ $made == "$STORES" ]] || { echo "$name made $made outputs for $STORES stores" >&2; exit 1; }
        outs[$name]=$(find "$copy" \( -name '*.mdz' -o -name '*.zip' -o -name '*.copy' \) -printf '%s\n' | awk '{s+=$1} END {print s}')
        rm -rf "$copy"
    done
done

# > Nothing for no values (a case not run), so that ratios to it print "-" instead of dividing by zero.
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {if (NR) print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

echo "# Batch benchmark"
echo
echo "Command: \`BENCH_STORES=$STORES BENCH_RUNS=$RUNS BENCH_JOBS=$JOBS $invocation\` (run in \`$root\`)"
echo
echo "Machine: $(nproc) cores, $(uname -sr); $(swift --version 2>/dev/null | head -1); docconvert $([[ $STATIC == 1 ]] && echo "built with --static-swift-stdlib" || echo "with the Swift runtime as shared libraries")"
if [[ $SHAPE == issue ]]; then
    echo "Tree: $STORES SQLite stores, 16-256 KiB each ($((TOTAL_BYTES / 1048576)) MiB in all), in 40 folders, a third"
    echo "of them with their rows only in a \`-wal\`;"
else
    echo "Tree: $STORES SQLite stores, 16-256 KiB each ($((TOTAL_BYTES / 1048576)) MiB in all), in 210 nested folders;"
fi
echo "medians of $RUNS runs, each case on a fresh copy of the tree, page cache warm$([[ $FS == journal ]] && echo ", on a loop-mounted ext4 with a journal")."
echo
python_median=$(echo "${times[python]:-}" | median 2>/dev/null || true)
python_out=${outs[python]:-}
copy_median=$(echo "${times[copy]:-}" | median 2>/dev/null || true)
echo "| case | time (s) | stores/s | MB/s | output MiB | peak RSS MiB | rate vs python | size vs python | speed vs floor |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for name in $CASES; do
    t=$(echo "${times[$name]}" | median)
    r=$(echo "${rss[$name]}" | median)
    python3 - "$name" "$t" "$r" "$STORES" "$TOTAL_BYTES" "${outs[$name]}" "${python_median:-}" "${python_out:-}" "${copy_median:-}" <<'PY'
import sys
name, t, r, stores, total, out, py, py_out, floor = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), sys.argv[7], sys.argv[8], sys.argv[9]
label = {"ours": "docconvert batch (default: deflate 2, ISA-L)", "base": "BENCH_BASE_BIN batch (same options)", "ours-d6": "docconvert batch --level 6 (zlib)",
         "ours-store": "docconvert batch --compression store",
         "shell": "shell loop: sqlite3 .backup + zip -6", "xargs": "xargs -P: sqlite3 .backup + zip -6",
         "python": "python3 Pool: backup + zipfile + fsync", "copy": "floor: python3 Pool copy + fsync"}[name]
ratio = f"{(float(py) / t):.2f}x" if py and t > 0 else "-"
size = f"{out / int(py_out):.3f}x" if py_out and int(py_out) > 0 else "-"
speed = f"{(float(floor) / t):.2f}" if floor and t > 0 else "-"
print(f"| {label} | {t:.2f} | {stores / t:.0f} | {total / t / 1e6:.1f} | {out / 1048576:.1f} | {r / 1024:.1f} | {ratio} | {size} | {speed} |")
PY
done
echo
echo "speed vs floor = the durable copy's median time / the case's (1.00: as fast as copying every store durably)."
echo
echo "Raw wall times (s), in run order:"
echo
for name in $CASES; do echo "- $name: ${times[$name]}"; done

# --- system calls per store: one more run of ours (and base) under strace -c -f, on a fresh copy, not timed -------
if [[ ${BENCH_SYSCALLS:-1} != 0 ]] && command -v strace >/dev/null; then
    echo
    echo "System calls per store (\`strace -c -f\` over one more, untimed run on a fresh copy; futex and epoll_wait are"
    echo "the threads' hand-offs and waits, counted apart; metadata = newfstatat, statx, openat, getdents64, readlink):"
    echo
    echo "| binary | all but futex/epoll_wait | metadata | pread64 | fsync | futex | most frequent |"
    echo "|---|---:|---:|---:|---:|---:|---|"
    for name in ours base; do
        [[ " $CASES " == *" $name "* ]] || continue
        bin=$BIN
        [[ $name == base ]] && bin=$BASE_BIN
        copy="$RUNS_IN/strace-$name"
        rm -rf "$copy"
        cp -a "$TREE" "$copy"
        sync
        strace -c -f -o "$WORK/strace-$name.txt" "$bin" batch "$copy" --jobs "$JOBS" --legacy "$LEGACY" --quiet >/dev/null 2>&1
        rm -rf "$copy"
        python3 - "$name" "$WORK/strace-$name.txt" "$STORES" <<'PY'
import sys
name, path, stores = sys.argv[1], sys.argv[2], int(sys.argv[3])
calls = {}
for line in open(path):
    fields = line.split()
    if len(fields) >= 5 and fields[0][0].isdigit() and fields[-1] != "total":
        calls[fields[-1]] = int(fields[3])
waits = {"futex", "epoll_wait"}
rest = {k: v for k, v in calls.items() if k not in waits}
meta = sum(v for k, v in calls.items() if k in {"newfstatat", "statx", "openat", "getdents64", "readlink", "stat", "lstat", "fstat"})
top = ", ".join(f"{k} {v / stores:.1f}" for k, v in sorted(rest.items(), key=lambda kv: -kv[1])[:8])
per = lambda n: f"{n / stores:.1f}"
print(f"| {name} | {per(sum(rest.values()))} | {per(meta)} | {per(calls.get('pread64', 0))} | {per(calls.get('fsync', 0))} | {per(calls.get('futex', 0))} | {top} |")
PY
    done
fi
