#!/usr/bin/env bash
# The physical floor of reading a store in place: what one segment costs to inflate (ISA-L, as the reader does) and
# to check (SHA-256, CRC-32), by segment size, and what restarting the deflate stream more often costs in size (ISA-L
# level 2, the writer's default). A point read that misses the cache pays one segment; these numbers bound how
# small a segment, and so how cheap a point read, any layout of restart points and digests can make.
#
#   scripts/bench-segment-floor.sh
#
# Environment (all optional):
#   BENCH_MB=64              size of the generated store in MiB (text rows of words, as scripts/bench-extension.sh)
#   BENCH_DIR=./bench-work   work folder (relative to the repository root; git-ignored); the virtual environment
#                            with python-isal (PyPI: ISA-L's inflate, deflate and CRC-32 from Python) is kept there
#
# Prints a Markdown table; progress goes to stderr. The times are medians of 5 passes over the first 8 MiB of the
# store cut into segments; Python's call overhead (about 1 us a call) is included.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
MB=${BENCH_MB:-64}
DIR=${BENCH_DIR:-./bench-work}
[[ $MB =~ ^[1-9][0-9]*$ ]] && (( MB >= 8 )) || { echo "BENCH_MB must be an integer of at least 8" >&2; exit 64; }
source "$root/scripts/bench-common.sh"

WORK="$DIR/segment-floor"
mkdir -p "$WORK"
VENV="$WORK/venv"
if [[ ! -x $VENV/bin/python ]] || ! "$VENV/bin/python" -c 'import isal' 2>/dev/null; then
    log "making a virtual environment with python-isal (PyPI)"
    /usr/bin/python3 -m venv "$VENV" >&2
    "$VENV/bin/pip" install --quiet isal >&2
fi
STORE="$WORK/items-$MB.sqlite"
if [[ ! -s $STORE ]]; then
    log "making a $MB MiB store"
    bench_item_store "$STORE" "$MB"
fi

echo "# The cost of one segment (\`scripts/bench-segment-floor.sh\`)"
echo
echo "Command: \`BENCH_MB=$MB $0\` ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
echo
"$VENV/bin/python" - "$STORE" <<'EOF'
import hashlib, statistics, sys, time
import isal
from isal import isal_zlib as z
data = open(sys.argv[1], 'rb').read()
sample = 8 << 20
print('Store: %d bytes. ISA-L through python-isal %s; SHA-256 through Python\'s hashlib (OpenSSL).' % (len(data), isal.__version__))
print()
print('| segment | inflate, us | SHA-256, us | CRC-32, us | one segment, us | MB/s of store |')
print('| ---: | ---: | ---: | ---: | ---: | ---: |')
for size in (16384, 32768, 65536, 131072, 262144, 524288, 1048576):
    pieces = [data[o:o + size] for o in range(0, sample, size)]
    packed = []
    for piece in pieces:
        c = z.compressobj(2, z.DEFLATED, -15)
        packed.append(c.compress(piece) + c.flush())
    inflate, sha, crc = [], [], []
    for _ in range(5):
        t = time.perf_counter()
        for p in packed: z.decompress(p, -15, size)
        inflate.append((time.perf_counter() - t) / len(packed) * 1e6)
        t = time.perf_counter()
        for p in pieces: hashlib.sha256(p).digest()
        sha.append((time.perf_counter() - t) / len(pieces) * 1e6)
        t = time.perf_counter()
        for p in pieces: z.crc32(p)
        crc.append((time.perf_counter() - t) / len(pieces) * 1e6)
    a, b, c = statistics.median(inflate), statistics.median(sha), statistics.median(crc)
    print('| %d KiB | %.1f | %.1f | %.1f | %.1f | %.0f |' % (size >> 10, a, b, c, a + b + c, size / (a + b + c)))
print()
print('Restart points (a slice deflated without the 32 KiB before it) against the writer\'s 128 KiB, ISA-L level 2,')
print('the other slices primed with the 32 KiB before them, over the whole store:')
print()
def deflated(slice_size, restart):
    total = 0
    for o in range(0, len(data), slice_size):
        if o % restart == 0:
            c = z.compressobj(2, z.DEFLATED, -15)
        else:
            c = z.compressobj(2, z.DEFLATED, -15, zdict=data[max(0, o - 32768):o])
        total += len(c.compress(data[o:o + slice_size]) + c.flush(z.Z_SYNC_FLUSH))
    return total
base = deflated(131072, 131072)
print('| restart every | deflated bytes | against 128 KiB |')
print('| ---: | ---: | ---: |')
for restart in (16384, 32768, 65536, 131072, 262144, 1048576):
    size = deflated(min(restart, 131072), restart)
    print('| %d KiB | %d | %+.2f %% |' % (restart >> 10, size, (size / base - 1) * 100))
EOF
