#!/usr/bin/env bash
# Converts one large legacy store (a Core Data-like SQLite store whose last transactions live only in its -wal) with
# `docconvert convert` and with the by-hand pipelines a user would otherwise write, on the same files in the same run,
# and prints a Markdown table of medians.
#
#   scripts/bench-convert.sh
#
# Environment (all optional):
#   BENCH_MB=512             size of the store's main file in MiB
#   BENCH_WAL_MB=64          size of the uncheckpointed -wal in MiB
#   BENCH_RUNS=3             timed runs per case; the table shows medians
#   BENCH_DIR=./bench-work   work folder (relative to the repository root; git-ignored)
#   BENCH_KEEP=1             keep the work folder afterwards
#
# Cases (every run starts from a fresh copy of the store and its -wal, made before the timing starts; the page cache
# is left warm for every case alike):
#   ours           docconvert convert SRC --output B --legacy keep              (deflate 6, the default)
#   ours-1         the same with --level 1
#   ours-store     the same with --compression store
#   shell          sqlite3 SRC ".backup TMP" && zip -q -6 -j B TMP && rm TMP
#   python         python3: sqlite3 backup, zipfile deflate 6, fsync, os.replace
#   backup         sqlite3 SRC ".backup TMP" alone: consolidation without compression, the floor for store mode
# Timing: `/usr/bin/time -f '%e %M'` (wall seconds, peak RSS KiB). Rounds are interleaved.
set -euo pipefail

invocation="$0${*:+ $*}"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

MB=${BENCH_MB:-512}
WAL_MB=${BENCH_WAL_MB:-64}
RUNS=${BENCH_RUNS:-3}
DIR=${BENCH_DIR:-./bench-work}
KEEP=${BENCH_KEEP:-0}
for value in "$MB" "$WAL_MB" "$RUNS"; do
    [[ $value =~ ^[1-9][0-9]*$ ]] || { echo "BENCH_MB, BENCH_WAL_MB and BENCH_RUNS must be positive integers" >&2; exit 64; }
done
for tool in python3 zip sqlite3 /usr/bin/time swift; do
    command -v "$tool" >/dev/null || { echo "missing: $tool (scripts/setup.sh installs it)" >&2; exit 69; }
done
log() { echo "[bench] $*" >&2; }

log "building docconvert (release)"
swift build -c release --product docconvert >&2
BIN="$(swift build -c release --show-bin-path)/docconvert"

mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
WORK="$DIR/convert"
rm -rf "$WORK"
mkdir -p "$WORK/source"
cleanup() { if [[ $KEEP == 1 ]]; then log "kept $WORK"; else rm -rf "$WORK"; rmdir "$DIR" 2>/dev/null || true; fi; }
trap cleanup EXIT

# --- the store ---------------------------------------------------------------------------------------------------------
SRC="$WORK/source/Journal.sqlite"
log "generating a ${MB} MiB Core Data-like store with a ${WAL_MB} MiB -wal"
python3 - "$SRC" "$MB" "$WAL_MB" <<'PY'
# Core Data's layout (Z_METADATA with a binary plist and Z_UUID, Z_PRIMARYKEY, a Z-entity table); rows mix text drawn
# from a Zipf vocabulary (compresses like prose) and random blobs (like photos), so deflate 6 gives about 1.6:1.
# The main file is written and checkpointed, then the last WAL_MB MiB of transactions are committed with
# checkpointing off, and the files are copied while the connection is still open: the copy's -wal holds those
# transactions and nothing else has them.
import os, plistlib, random, shutil, sqlite3, sys, uuid
path, mib, wal_mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(20261123)
letters = "etaoinshrdlucmfwypvbgkqjxz"
vocab = ["".join(rng.choices(letters, k=rng.randint(2, 10))) for _ in range(4000)]
weights = [1.0 / (rank + 1) for rank in range(len(vocab))]
corpus = " ".join(rng.choices(vocab, weights=weights, k=1_500_000))
work = path + ".gen"
db = sqlite3.connect(work, isolation_level=None)
db.execute("PRAGMA page_size = 4096")
db.execute("PRAGMA journal_mode = WAL")
db.execute("PRAGMA wal_autocheckpoint = 0")
db.execute("PRAGMA synchronous = OFF")
db.execute("CREATE TABLE Z_METADATA (Z_VERSION INTEGER PRIMARY KEY, Z_UUID VARCHAR(255), Z_PLIST BLOB)")
db.execute("CREATE TABLE Z_PRIMARYKEY (Z_ENT INTEGER PRIMARY KEY, Z_NAME VARCHAR, Z_SUPER INTEGER, Z_MAX INTEGER)")
db.execute("CREATE TABLE ZENTRY (Z_PK INTEGER PRIMARY KEY, Z_ENT INTEGER, Z_OPT INTEGER, ZTITLE VARCHAR, ZBODY VARCHAR, ZPHOTO BLOB, ZDATE TIMESTAMP)")
plist = plistlib.dumps({"NSStoreType": "SQLite", "NSStoreModelVersionIdentifiers": ["Journal 3"],
                        "NSPersistenceFrameworkVersion": 1244, "NSStoreModelVersionHashes": {"Entry": b"\x01" * 32}},
                       fmt=plistlib.FMT_BINARY)
db.execute("INSERT INTO Z_METADATA VALUES (1, ?, ?)", (str(uuid.UUID(int=rng.getrandbits(128))).upper(), plist))
db.execute("INSERT INTO Z_PRIMARYKEY VALUES (1, 'Entry', 0, 0)")
pk = 0
def fill(limit_pages):
    global pk
    while True:
        db.execute("BEGIN")
        for _ in range(1000):
            pk += 1
            n = rng.randint(64, 1536)
            if pk % 2:
                start = rng.randrange(0, len(corpus) - n)
                db.execute("INSERT INTO ZENTRY VALUES (?,1,1,?,?,NULL,?)", (pk, corpus[start:start + 24], corpus[start:start + n], 7e8 + pk))
            else:
                db.execute("INSERT INTO ZENTRY VALUES (?,1,1,?,NULL,?,?)", (pk, "photo", rng.randbytes(n), 7e8 + pk))
        db.execute("UPDATE Z_PRIMARYKEY SET Z_MAX = ? WHERE Z_ENT = 1", (pk,))
        db.execute("COMMIT")
        if limit_pages():
            return
fill(lambda: db.execute("PRAGMA page_count").fetchone()[0] * 4096 >= mib << 20)
db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
fill(lambda: os.path.getsize(work + "-wal") >= wal_mib << 20)
shutil.copyfile(work, path)
shutil.copyfile(work + "-wal", path + "-wal")
db.close()
for suffix in ("", "-wal", "-shm"):
    if os.path.exists(work + suffix):
        os.remove(work + suffix)
PY
SRC_BYTES=$(( $(stat -c %s "$SRC") + $(stat -c %s "$SRC-wal") ))
log "source: $(stat -c %s "$SRC") + $(stat -c %s "$SRC-wal") bytes (store + -wal)"
# What SQLite reads (on a copy: reading may checkpoint): the row count every output must have.
mkdir -p "$WORK/oracle"
cp "$SRC" "$SRC-wal" "$WORK/oracle/"
EXPECTED=$(sqlite3 "$WORK/oracle/Journal.sqlite" "SELECT count(*), max(Z_PK) FROM ZENTRY")
rm -rf "$WORK/oracle"
log "SQLite reads: $EXPECTED (rows, max Z_PK)"

cat > "$WORK/by-hand.py" <<'PY'
import os, sqlite3, sys, zipfile
src, out = sys.argv[1], sys.argv[2]
tmp = out + ".store.tmp"
source = sqlite3.connect(src)
target = sqlite3.connect(tmp)
source.backup(target)
target.close(); source.close()
with zipfile.ZipFile(out + ".tmp", "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as archive:
    archive.write(tmp, "StoreContent/persistentStore")
with open(out + ".tmp", "rb") as handle:
    os.fsync(handle.fileno())
os.replace(out + ".tmp", out)
os.remove(tmp)
PY

CASES="ours ours-1 ours-store shell python backup"
declare -A times rss sizes
run_case() {  # name, run folder
    local name=$1 run=$2 src="$2/Journal.sqlite"
    case $name in
        ours) /usr/bin/time -f '%e %M' -o "$WORK/time" "$BIN" convert "$src" --output "$run/out" --legacy keep >/dev/null ;;
        ours-1) /usr/bin/time -f '%e %M' -o "$WORK/time" "$BIN" convert "$src" --output "$run/out" --legacy keep --level 1 >/dev/null ;;
        ours-store) /usr/bin/time -f '%e %M' -o "$WORK/time" "$BIN" convert "$src" --output "$run/out" --legacy keep --compression store >/dev/null ;;
        shell) /usr/bin/time -f '%e %M' -o "$WORK/time" bash -c 'sqlite3 "$1" ".backup $2/tmp.sqlite" && zip -q -6 -j "$2/out.zip" "$2/tmp.sqlite" && mv "$2/out.zip" "$2/out" && rm "$2/tmp.sqlite"' _ "$src" "$run" ;;
        python) /usr/bin/time -f '%e %M' -o "$WORK/time" python3 "$WORK/by-hand.py" "$src" "$run/out" ;;
        backup) /usr/bin/time -f '%e %M' -o "$WORK/time" sqlite3 "$src" ".backup $run/out" ;;
    esac
    tail -1 "$WORK/time"
}
check_output() {  # name, run folder: the output holds every row SQLite read from the source
    local name=$1 run=$2 got
    case $name in
        ours*) "$BIN" verify "$run/out" >/dev/null
               "$BIN" extract "$run/out" --output "$run/check.sqlite" >/dev/null
               got=$(sqlite3 "$run/check.sqlite" "SELECT count(*), max(Z_PK) FROM ZENTRY") ;;
        shell|python) mkdir -p "$run/x" && (cd "$run/x" && unzip -q ../out) && got=$(sqlite3 "$(find "$run/x" -type f | head -1)" "SELECT count(*), max(Z_PK) FROM ZENTRY") ;;
        backup) got=$(sqlite3 "$run/out" "SELECT count(*), max(Z_PK) FROM ZENTRY") ;;
    esac
    [[ $got == "$EXPECTED" ]] || { echo "$name lost rows: $got, expected $EXPECTED" >&2; exit 1; }
}

for round in $(seq 1 "$RUNS"); do
    for name in $CASES; do
        run="$WORK/run-$name"
        rm -rf "$run" && mkdir -p "$run"
        cp "$SRC" "$SRC-wal" "$run/"
        sync
        read -r seconds kib < <(run_case "$name" "$run")
        log "round $round: $name ${seconds}s ${kib} KiB"
        times[$name]+="$seconds "
        rss[$name]+="$kib "
        sizes[$name]=$(stat -c %s "$run/out")
        [[ $round == 1 ]] && check_output "$name" "$run"
        rm -rf "$run"
    done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "# Conversion benchmark"
echo
echo "Command: \`BENCH_MB=$MB BENCH_WAL_MB=$WAL_MB BENCH_RUNS=$RUNS $invocation\` (run in \`$root\`)"
echo
echo "Machine: $(nproc) cores, $(uname -sr); $(swift --version 2>/dev/null | head -1)"
echo "Source: a Core Data-like store, $(( $(stat -c %s "$SRC") >> 20 )) MiB + $(( $(stat -c %s "$SRC-wal") >> 20 )) MiB -wal"
echo "(the -wal's rows exist nowhere else; every output was checked to hold them). Medians of $RUNS runs, page cache warm."
echo
echo "| case | time (s) | MB/s | output MiB | ratio | peak RSS MiB | speed vs shell | size vs shell |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
shell_t=$(echo "${times[shell]}" | median)
for name in $CASES; do
    t=$(echo "${times[$name]}" | median)
    r=$(echo "${rss[$name]}" | median)
    python3 - "$name" "$t" "$r" "$SRC_BYTES" "${sizes[$name]}" "$shell_t" "${sizes[shell]}" <<'PY'
import sys
name, t, r, src, out, shell_t, shell_size = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7])
label = {"ours": "docconvert convert (deflate 6)", "ours-1": "docconvert convert --level 1",
         "ours-store": "docconvert convert --compression store", "shell": "sqlite3 .backup + zip -6",
         "python": "python3 backup + zipfile 6 + fsync + rename", "backup": "sqlite3 .backup alone"}[name]
print(f"| {label} | {t:.2f} | {src / t / 1e6:.1f} | {out / 1048576:.1f} | {src / out:.2f} | {r / 1024:.1f} | {shell_t / t:.2f}x | {out / shell_size:.2f}x |")
PY
done
