#!/usr/bin/env bash
# Packs and unpacks one large SQLite store with ManagedDocument's BundleWriter/BundleReader and with zip, unzip,
# bsdtar and ZIPFoundation (the Swift peer, Benchmarks/Sources/zipfoundation-peer), on the same file in the same run,
# and prints a Markdown table of medians.
#
#   scripts/bench-bundle.sh
#
# Environment (all optional):
#   BENCH_MB=512             size of the generated store in MiB
#   BENCH_RUNS=3             timed runs per case; the table shows medians
#   BENCH_DIR=./bench-work   work folder (relative to the repository root; git-ignored by default)
#   BENCH_KEEP=1             keep the store, bundles and extracted folders afterwards
#   BENCH_DROP_CACHES=0      do not drop the page cache before each run (by default it is dropped when
#                            `echo 3 > /proc/sys/vm/drop_caches` works silently, and left warm otherwise)
#
# Timing: `/usr/bin/time -f '%e %M'` (wall seconds, peak RSS in KiB) around each command. Runs are interleaved
# round by round (every case once, then again) so that drift on a shared machine spreads over all cases.
# Progress goes to stderr; the report (Markdown) goes to stdout.
set -euo pipefail

invocation="$0${*:+ $*}"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

MB=${BENCH_MB:-512}
RUNS=${BENCH_RUNS:-3}
DIR=${BENCH_DIR:-./bench-work}
KEEP=${BENCH_KEEP:-0}
[[ $MB =~ ^[1-9][0-9]*$ ]] || { echo "BENCH_MB must be a positive integer" >&2; exit 64; }
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || { echo "BENCH_RUNS must be a positive integer" >&2; exit 64; }
for tool in python3 zip unzip bsdtar /usr/bin/time swift; do
    command -v "$tool" >/dev/null || { echo "missing: $tool" >&2; exit 69; }
done

source "$root/scripts/bench-common.sh"

echo "# Bundle benchmark"
echo
echo "Command: \`BENCH_MB=$MB BENCH_RUNS=$RUNS BENCH_DIR=${BENCH_DIR:-./bench-work} BENCH_KEEP=$KEEP $invocation\` (run in \`$root\`)"
echo

# --- build ------------------------------------------------------------------------------------------------------
log "building the benchmark (release)"
swift build -c release --package-path Benchmarks >&2
BIN="$(swift build -c release --package-path Benchmarks --show-bin-path)/bundle-benchmark"
PEER="$(swift build -c release --package-path Benchmarks --show-bin-path)/zipfoundation-peer"
[[ -x $BIN && -x $PEER ]] || { echo "no benchmark binaries at $BIN, $PEER" >&2; exit 70; }

# --- work folder, cleanup and page cache (scripts/bench-common.sh) ----------------------------------------------
bench_work_folder run
mkdir -p "$WORK/out"
bench_page_cache

# --- the store ---------------------------------------------------------------------------------------------------
STORE="$WORK/persistentStore"
log "generating a ${MB} MiB SQLite store at $STORE"
gen_start=$(date +%s)
python3 - "$STORE" "$MB" <<'PY'
# Mixed content, row by row: text rows (4000 made-up words drawn with a Zipf law: deflate 6 shrinks it about 3x, like
# English prose) alternate with
# random blobs (incompressible), each 64..1536 bytes, so every page holds both, pages are nearly full, and about
# half the file's bytes are each.
import os, random, sqlite3, sys
path, mib = sys.argv[1], int(sys.argv[2])
target = mib << 20
rng = random.Random(20261122)
letters = "etaoinshrdlucmfwypvbgkqjxz"
vocab = ["".join(rng.choices(letters, k=rng.randint(2, 10))) for _ in range(4000)]
weights = [1.0 / (rank + 1) for rank in range(len(vocab))]
corpus = " ".join(rng.choices(vocab, weights=weights, k=1_500_000)).encode()  # about 8 MiB to slice rows from
db = sqlite3.connect(path, isolation_level=None)
db.execute("PRAGMA page_size = 4096")
db.execute("PRAGMA journal_mode = DELETE")
db.execute("PRAGMA synchronous = OFF")
db.execute("PRAGMA cache_size = -65536")
db.execute("CREATE TABLE item (id INTEGER PRIMARY KEY, kind TEXT NOT NULL, body TEXT, data BLOB)")
payload = 0  # bytes of row content
while True:
    db.execute("BEGIN")
    rows = []
    for _ in range(1_000):
        n = rng.randint(64, 1536)
        if len(rows) % 2 == 0:
            start = rng.randrange(0, len(corpus) - n)
            rows.append(("text", corpus[start:start + n].decode(), None))
        else:
            rows.append(("blob", None, os.urandom(n)))
        payload += n
    db.executemany("INSERT INTO item (kind, body, data) VALUES (?, ?, ?)", rows)
    db.execute("COMMIT")
    # Rows and pages carry some 10-15 % overhead over the payload: stop on the file's size (batches are ~0.8 MB).
    if payload >= target // 2 and db.execute("PRAGMA page_count").fetchone()[0] * 4096 >= target:
        break
mode = db.execute("PRAGMA journal_mode").fetchone()[0]
db.close()
assert mode == "delete", mode
PY
gen_seconds=$(( $(date +%s) - gen_start ))
STORE_BYTES=$(stat -c %s "$STORE")
log "store: $STORE_BYTES bytes in ${gen_seconds}s"

# --- cases -------------------------------------------------------------------------------------------------------
# Each case: its row (pack_case/unpack_case ID TOOL OPERATION PEER OUTPUT) and its command, the function case_ID
# (scripts/bench-common.sh), which writes to $OUT, the case's output path. Output paths are removed (pack) or
# recreated empty (unpack) before every run.
OUT_DIR="$WORK/out"
BUNDLE6="$OUT_DIR/ours-d6.mdz"
pack_cases=()
unpack_cases=()
declare -A TOOL OP PEER_ID OUTPUT
pack_case() { pack_cases+=("$1"); TOOL[$1]=$2; OP[$1]=$3; PEER_ID[$1]=$4; OUTPUT[$1]=$5; }
unpack_case() { unpack_cases+=("$1"); TOOL[$1]=$2; OP[$1]=$3; PEER_ID[$1]=$4; OUTPUT[$1]=$5; }
# Which bsdtar options this bsdtar accepts (libarchive 3.6.2 takes both), tried on a small file.
head -c 65536 "$STORE" >"$WORK/persistentStore.probe"
probe="$WORK/probe.zip"
bsdtar_level1=0
if bsdtar -cf "$probe" --format zip --options zip:compression-level=1 -C "$WORK" persistentStore.probe 2>/dev/null; then
    bsdtar_level1=1
fi
bsdtar_store=0
if bsdtar -cf "$probe" --format zip --options zip:compression=store -C "$WORK" persistentStore.probe 2>/dev/null; then
    bsdtar_store=1
fi
rm -f "$probe" "$WORK/persistentStore.probe"

pack_case ours-store "ours (BundleWriter)" "pack, store" zip-0 "$OUT_DIR/ours-store.mdz"
case_ours-store() { timed "$BIN" pack "$STORE" "$OUT" 0; }
pack_case zip-0 "zip -0" "pack, store" "" "$OUT_DIR/zip-0.zip"
case_zip-0() { timed zip -q -0 -j "$OUT" "$STORE"; }
pack_case zf-store "ZIPFoundation 0.9.20 (Archive.addEntry, .none)" "pack, store" zip-0 "$OUT_DIR/zf-store.zip"
case_zf-store() { timed "$PEER" pack "$STORE" "$OUT" store; }
if [[ $bsdtar_store == 1 ]]; then
    pack_case bsdtar-store "bsdtar --format zip --options zip:compression=store" "pack, store" zip-0 "$OUT_DIR/bsdtar-store.zip"
    case_bsdtar-store() { timed bsdtar -cf "$OUT" --format zip --options zip:compression=store -C "$WORK" persistentStore; }
fi
pack_case ours-d1 "ours (BundleWriter, ISA-L)" "pack, deflate 1" zip-1 "$OUT_DIR/ours-d1.mdz"
case_ours-d1() { timed "$BIN" pack "$STORE" "$OUT" 1; }
pack_case zip-1 "zip -1" "pack, deflate 1" "" "$OUT_DIR/zip-1.zip"
case_zip-1() { timed zip -q -1 -j "$OUT" "$STORE"; }
if [[ $bsdtar_level1 == 1 ]]; then
    pack_case bsdtar-1 "bsdtar --format zip --options zip:compression-level=1" "pack, deflate 1" zip-1 "$OUT_DIR/bsdtar-1.zip"
    case_bsdtar-1() { timed bsdtar -cf "$OUT" --format zip --options zip:compression-level=1 -C "$WORK" persistentStore; }
fi
pack_case ours-d2 "ours (BundleWriter, ISA-L: the default)" "pack, deflate 2" zip-6 "$OUT_DIR/ours-d2.mdz"
case_ours-d2() { timed "$BIN" pack "$STORE" "$OUT" 2; }
pack_case ours-d6 "ours (BundleWriter, zlib)" "pack, deflate 6" zip-6 "$BUNDLE6"
case_ours-d6() { timed "$BIN" pack "$STORE" "$OUT" 6; }
pack_case zip-6 "zip -6" "pack, deflate 6" "" "$OUT_DIR/zip-6.zip"
case_zip-6() { timed zip -q -6 -j "$OUT" "$STORE"; }
pack_case bsdtar "bsdtar --format zip (default: deflate 6)" "pack, deflate 6" zip-6 "$OUT_DIR/bsdtar.zip"
case_bsdtar() { timed bsdtar -cf "$OUT" --format zip -C "$WORK" persistentStore; }
pack_case zf-6 "ZIPFoundation 0.9.20 (Archive.addEntry, .deflate: zlib's level 6)" "pack, deflate 6" zip-6 "$OUT_DIR/zf-6.zip"
case_zf-6() { timed "$PEER" pack "$STORE" "$OUT" deflate; }

unpack_case ours-unpack "ours (BundleReader.extract)" "unpack ours-d6 bundle" unzip "$OUT_DIR/x-ours"
case_ours-unpack() { timed "$BIN" unpack "$BUNDLE6" "$OUT"; }
unpack_case unzip "unzip -q -o" "unpack ours-d6 bundle" "" "$OUT_DIR/x-unzip"
case_unzip() { timed unzip -q -o "$BUNDLE6" -d "$OUT"; }
unpack_case bsdtar-x "bsdtar -xf" "unpack ours-d6 bundle" unzip "$OUT_DIR/x-bsdtar"
case_bsdtar-x() { timed bsdtar -xf "$BUNDLE6" -C "$OUT"; }
unpack_case zf-x "ZIPFoundation 0.9.20 (FileManager.unzipItem)" "unpack ours-d6 bundle" unzip "$OUT_DIR/x-zf"
case_zf-x() { timed "$PEER" unpack "$BUNDLE6" "$OUT"; }

RESULTS="$WORK/results.tsv"
: >"$RESULTS"
declare -A TIMES RSS

# run KIND ID ROUND: one timed run; KIND is pack or unpack.
run() {
    local kind=$1 id=$2 round=$3
    OUT=${OUTPUT[$id]}
    rm -rf "$OUT"
    if [[ $kind == unpack ]]; then mkdir -p "$OUT"; fi
    run_case "$id" "$round" "${TOOL[$id]} (${OP[$id]})"
    local seconds=${TIMED[0]} kib=${TIMED[1]}
    TIMES[$id]+="${TIMES[$id]:+,}$seconds"
    RSS[$id]+="${RSS[$id]:+,}$kib"
    log "round $round/$RUNS  $(printf '%-14s' "$id") ${seconds}s  ${kib} KiB"
}

record() {
    local kind=$1 id=$2
    local tool=${TOOL[$id]} op=${OP[$id]} peer=${PEER_ID[$id]} out=${OUTPUT[$id]} size method=""
    if [[ $kind == pack ]]; then
        size=$(stat -c %s "$out")
        # How the store entry was written (zip's "Defl:N"/"Defl:F"/"Stored"), read back with unzip -v.
        method=$(unzip -v "$out" | awk '$NF ~ /persistentStore$/ { print $2; exit }')
    else
        size=$(du -sb "$out" | cut -f1)
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$id" "$tool" "$op" "$peer" "${TIMES[$id]}" "${RSS[$id]}" "$size" "$method" >>"$RESULTS"
}

log "packing: ${#pack_cases[@]} cases x $RUNS runs (page cache dropped before each run: $([[ $DROP == 1 ]] && echo yes || echo no))"
for ((round = 1; round <= RUNS; round++)); do
    for id in "${pack_cases[@]}"; do run pack "$id" "$round"; done
done
for id in "${pack_cases[@]}"; do record pack "$id"; done
# The peers' archives are no longer needed; the deflate-6 bundle is the input of the unpack cases.
for id in "${pack_cases[@]}"; do
    [[ ${OUTPUT[$id]} == "$BUNDLE6" ]] || rm -f "${OUTPUT[$id]}"
done

log "unpacking: ${#unpack_cases[@]} cases x $RUNS runs"
for ((round = 1; round <= RUNS; round++)); do
    for id in "${unpack_cases[@]}"; do run unpack "$id" "$round"; done
done
for id in "${unpack_cases[@]}"; do
    record unpack "$id"
    out=${OUTPUT[$id]}
    cmp -s "$STORE" "$out/StoreContent/persistentStore" || { echo "extracted store differs: $out" >&2; exit 1; }
done

# --- report -----------------------------------------------------------------------------------------------------
cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
fs=$(df -PT "$DIR" | awk 'NR == 2 { print $2 " on " $1 }')
echo "- Date: $(date -u +%Y-%m-%dT%H:%M:%SZ); host: $(nproc) cores, $cpu; $(uname -sr); work folder: $fs"
echo "- Tools: $(swift --version 2>&1 | head -n 1); $(bsdtar --version); $(zip -v | sed -n 2p | sed 's/^ *//'); $(unzip -v | head -n 1)"
echo "- Store: $STORE_BYTES bytes ($(( STORE_BYTES >> 20 )) MiB), page_size 4096, journal_mode DELETE; rows alternate Zipf-word text and random blobs of 64-1536 bytes; generated in ${gen_seconds}s"
echo "- $RUNS runs per case, interleaved round by round; medians shown. Page cache dropped before every run: $([[ $DROP == 1 ]] && echo 'yes (sync; echo 3 > /proc/sys/vm/drop_caches)' || echo 'no (not permitted or BENCH_DROP_CACHES=0; input warm in the page cache)')."
echo "- Ours pack = the full \`BundleWriter.write\`: SHA-256 of the store, compression, fsync and rename, and a re-read that inflates and checks every entry. zip, bsdtar and ZIPFoundation do not fsync. Ours unpack = \`BundleReader.extract\`: CRC-32 and SHA-256 checked, no fsync; ZIPFoundation's \`unzipItem\` checks CRC-32."
echo
python3 - "$RESULTS" "$STORE_BYTES" <<'PY'
import statistics, sys
path, store = sys.argv[1], int(sys.argv[2])
rows = [line.rstrip("\n").split("\t") for line in open(path) if line.strip()]
cases = {}
for id_, tool, op, peer, times, rss, size, method in rows:
    t = [float(x) for x in times.split(",")]
    cases[id_] = dict(tool=tool, op=op, peer=peer, times=t, time=statistics.median(t),
                      rss=statistics.median(int(x) for x in rss.split(",")) / 1024, size=int(size), method=method)
print("| tool | operation | median s | MB/s | output MiB | store entry | peak RSS MiB | peer | time ÷ peer | size ÷ peer |")
print("|---|---|---:|---:|---:|---|---:|---|---:|---:|")
for id_, c in cases.items():
    mbps = store / 1e6 / c["time"] if c["time"] > 0 else float("inf")
    peer = cases.get(c["peer"])
    if peer:
        ratio = f'{c["time"] / peer["time"]:.2f}×' if peer["time"] > 0 else "n/a"
        size_ratio = f'{c["size"] / peer["size"]:.3f}×'
        peer_name = peer["tool"]
    else:
        ratio = size_ratio = peer_name = "—"
    print(f'| {c["tool"]} | {c["op"]} | {c["time"]:.2f} | {mbps:.0f} | {c["size"] / 2**20:.1f} | {c["method"] or "—"} | '
          f'{c["rss"]:.1f} | {peer_name} | {ratio} | {size_ratio} |')
print()
print("MB/s = store size (10^6 bytes) ÷ median wall time. Output MiB = archive size (pack) or extracted bytes (unpack).")
print("time ÷ peer > 1 means slower than the peer at the same level.")
same = [("ours-store", "bsdtar-store"), ("ours-d1", "bsdtar-1"), ("ours-d6", "bsdtar"), ("ours-unpack", "bsdtar-x")]
lines = [f'{cases[a]["op"]}: {cases[a]["time"] / cases[b]["time"]:.2f}×' for a, b in same
         if a in cases and b in cases and cases[b]["time"] > 0]
if lines:
    print()
    print("Ours vs bsdtar (the same libarchive container; deflate 1 is ISA-L in ours, zlib in bsdtar; deflate 6 zlib in both), time ratio: " + "; ".join(lines) + ".")
zf = [("ours-store", "zf-store", "pack, store"), ("ours-d2", "zf-6", "pack, ours at its default (deflate 2) vs ZIPFoundation's deflate"),
      ("ours-d6", "zf-6", "pack, deflate 6 both"), ("ours-unpack", "zf-x", "unpack the deflate-6 bundle")]
rows = [(label, cases[a], cases[b]) for a, b, label in zf if a in cases and b in cases]
if rows:
    print()
    print("Ours vs ZIPFoundation, the Swift peer (target: at least 2x its speed on pack and unpack, at no more memory):")
    print()
    print("| operation | ours s | ZIPFoundation s | speed ÷ ZIPFoundation | ours RSS MiB | ZIPFoundation RSS MiB | size ÷ ZIPFoundation |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, ours, peer in rows:
        print(f'| {label} | {ours["time"]:.2f} | {peer["time"]:.2f} | {peer["time"] / ours["time"]:.2f}× | {ours["rss"]:.1f} | '
              f'{peer["rss"]:.1f} | {ours["size"] / peer["size"]:.3f}× |')
print()
print("Raw wall times (s), in run order:")
print()
for id_, c in cases.items():
    print(f'- {c["tool"]}, {c["op"]}: {", ".join(f"{x:.2f}" for x in c["times"])}')
PY
