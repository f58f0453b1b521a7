#!/usr/bin/env bash
# Makes the committed seed corpora in Fuzz/Corpus/<target>/ (small: under 2 MiB in all) from bundles the built
# docconvert writes, the tests' kinds of hostile input, and ../shared/corpus when it is there.
# Usage: Fuzz/make-seeds.sh [path to docconvert]   (default: .build/debug/docconvert; run `swift build` first)
set -euo pipefail
cd "$(dirname "$0")/.."
docconvert=${1:-.build/debug/docconvert}
out=Fuzz/Corpus
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$out" && mkdir -p "$out"/{bundle,metadata,inflate,legacy,document,fleet}

python3 - "$work" <<'PY'
import os, plistlib, sqlite3, sys, zlib
work = sys.argv[1]
def store(path, rows, blob):
    c = sqlite3.connect(path)
    c.execute("CREATE TABLE note(id INTEGER PRIMARY KEY, text TEXT, data BLOB)")
    c.executemany("INSERT INTO note(text, data) VALUES (?, ?)", [(f"note {i}", blob(i)) for i in range(rows)])
    c.commit(); c.close()
store(f"{work}/small.sqlite", 20, lambda i: bytes([i]) * 10)
store(f"{work}/large.sqlite", 6000, lambda i: (b"abcdefgh%d" % (i % 50)) * 20)  # > 1 MiB, deflates small
# A Core Data-like store with a binary plist in Z_METADATA.
c = sqlite3.connect(f"{work}/coredata.sqlite")
c.execute("CREATE TABLE Z_PRIMARYKEY (Z_ENT INTEGER PRIMARY KEY, Z_NAME VARCHAR, Z_SUPER INTEGER, Z_MAX INTEGER)")
c.execute("CREATE TABLE Z_METADATA (Z_VERSION INTEGER PRIMARY KEY, Z_UUID VARCHAR(255), Z_PLIST BLOB)")
plist = {"NSStoreType": "SQLite", "NSStoreUUID": "8F3C2B1A-0000-4000-8000-000000000001",
         "NSPersistenceFrameworkVersion": 1414, "NSStoreModelVersionIdentifiers": ["1"],
         "NSStoreModelVersionHashes": {"Note": b"\x01" * 32}, "_NSAutoVacuumLevel": "2"}
c.execute("INSERT INTO Z_METADATA VALUES (1, 'x', ?)", (plistlib.dumps(plist, fmt=plistlib.FMT_BINARY),))
c.commit(); c.close()
open(f"{work}/plist.bin", "wb").write(plistlib.dumps(plist, fmt=plistlib.FMT_BINARY))
open(f"{work}/plist.xml", "wb").write(plistlib.dumps(plist))
# Inflate seeds in the target's own format: interval code, size, 2-byte offset deltas, then a raw deflate stream
# made restartable with full flushes every interval.
for name, data in [("text", b"".join(b"line %d of the store\n" % i for i in range(20000))),
                   ("zeros", bytes(200000)), ("random", os.urandom(150000))]:
    interval = 65536
    z = zlib.compressobj(6, zlib.DEFLATED, -15)
    payload, offsets = b"", []
    for start in range(0, len(data), interval):
        offsets.append(len(payload))
        payload += z.compress(data[start:start + interval])
        payload += z.flush(zlib.Z_FULL_FLUSH if start + interval < len(data) else zlib.Z_FINISH)
    deltas = [b - a for a, b in zip(offsets, offsets[1:])]
    if any(d >= 65536 for d in deltas): continue
    header = bytes([0]) + (len(data) - 1).to_bytes(4, "big") + b"\0\0" + b"".join(d.to_bytes(2, "big") for d in deltas)
    open(f"{work}/inflate-{name}", "wb").write(header + payload)
PY

"$docconvert" create "$out/bundle/empty.mdz" --format-version 2 >/dev/null
"$docconvert" create "$out/bundle/small-stored.mdz" --from "$work/small.sqlite" --compression store --format-version 2 >/dev/null
"$docconvert" create "$out/bundle/small.mdz" --from "$work/small.sqlite" --format-version 2 >/dev/null
"$docconvert" create "$out/bundle/restarts.mdz" --from "$work/large.sqlite" --format-version 2 >/dev/null
# Format version 3 (FORMAT.md 13.2): the store index entry, small (one record) and with restart points.
"$docconvert" create "$out/bundle/v3-small.mdz" --from "$work/small.sqlite" --format-version 3 >/dev/null
"$docconvert" create "$out/bundle/v3-restarts.mdz" --from "$work/large.sqlite" --format-version 3 >/dev/null
# A repack, as another zip tool makes one (stale restart index, python's UTF-8 names).
python3 - "$out/bundle/restarts.mdz" "$out/bundle/repacked.mdz" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as src, zipfile.ZipFile(sys.argv[2], "w") as dst:
    for info in src.infolist():
        method = zipfile.ZIP_STORED if info.filename == "mimetype" else zipfile.ZIP_DEFLATED
        dst.writestr(info.filename, src.read(info.filename), compress_type=method)
    dst.writestr("AdditionalContent/café ☕.txt", b"x", compress_type=zipfile.ZIP_DEFLATED)
PY
# The polyglot family (a store entry that reads as one store in one stream and another segment by segment, and its
# milder forms), written from the bundle with a restart index.
python3 scripts/hostile/polyglot.py "$out/bundle/restarts.mdz" "$work" >/dev/null
for name in polyglot polyglot-segment-crc wrong-crc no-final-block final-mid-stream; do
    cp "$work/$name.mdz" "$out/bundle/$name.mdz"
done
for bundle in "$out"/bundle/*.mdz; do unzip -p "$bundle" DocumentMetadata.json > "$out/metadata/$(basename "$bundle" .mdz).json"; done
cp "$work"/inflate-* "$out/inflate/"
cp "$work/small.sqlite" "$work/coredata.sqlite" "$work/plist.bin" "$work/plist.xml" "$out/legacy/"
printf 'PK\003\004' > "$out/legacy/zip-head"
head -c 100 "$work/small.sqlite" > "$out/legacy/header-only.sqlite"

# fuzz-document's inputs are choices, not files (see Fuzz/Sources/fuzz-document/MetadataMutation.swift): the first
# byte picks one of the bundles the target writes at startup (0 small deflated, 1 small stored, 2 large deflated,
# 3 large stored; +0x80: the writable open saves a change), then each edit is an operation byte and its choices.
printf '\x00' > "$out/document/small-deflated"
printf '\x01' > "$out/document/small-stored"
printf '\x02' > "$out/document/large-deflated"
printf '\x03' > "$out/document/large-stored"
printf '\x80' > "$out/document/small-deflated-saved"
printf '\x82' > "$out/document/large-deflated-saved"
# store.segments.interval = 64 KiB, 1 MiB and 16 MiB, with digests to match (operation 15, value 19: the table).
printf '\x02\x0f\x13\x04' > "$out/document/large-deflated-interval-64k"
printf '\x02\x0f\x13\x07' > "$out/document/large-deflated-interval-1m"
printf '\x03\x0f\x13\x08' > "$out/document/large-stored-interval-16m"

corpus=../shared/corpus
if [ -d "$corpus" ]; then
    # Real zips and bombs under 40 KiB, and small real stores.
    find "$corpus/zip-real" "$corpus/zip-bombs" -type f -size -40k | sort | head -24 | while read -r file; do
        cp "$file" "$out/bundle/corpus-$(basename "$file")"
    done
    find "$corpus/coredata" "$corpus/packages" -type f -size -48k | sort | head -12 | while read -r file; do
        cp "$file" "$out/legacy/corpus-$(echo "${file#$corpus/}" | tr '/' '_')"
    done
else
    echo "make-seeds: $corpus is absent; seeds made from generated files only"
fi
# fuzz-fleet: a plan, a shard's report and a report's spool of a batch over the sample stores (the spool made from the
# report's own header and items, as a run killed after two items would have left it).
mkdir -p "$work/fleet" && cp -a Samples/stores "$work/fleet/tree"
"$docconvert" batch "$work/fleet/tree" --plan-only "$out/fleet/plan" --quiet > /dev/null
"$docconvert" batch "$work/fleet/tree" --plan "$out/fleet/plan" --legacy keep --quiet --report "$out/fleet/report.json" > /dev/null || true
python3 - "$out/fleet/report.json" "$out/fleet/spool" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
attempt = report["attempts"][0]
run = {key: value for key, value in report.items() if key not in ("attempts", "docconvertBatchReport")}
run["items"] = []
with open(sys.argv[2], "w") as spool:
    spool.write('{"docconvertBatchSpool":1,' + json.dumps({"attempt": attempt, "run": run}, sort_keys=True, separators=(",", ":"))[1:] + "\n")
    for item in report["items"][:2]:
        spool.write(json.dumps({"started": item["source"]}, separators=(",", ":")) + "\n")
        spool.write(json.dumps(item, sort_keys=True, separators=(",", ":")) + "\n")
    spool.write('{"started":"' + report["items"][2]["source"] + '"}\n')
PY
du -sh "$out" | sed 's/^/make-seeds: /'
