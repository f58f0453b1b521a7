#!/usr/bin/env python3
"""Two builds of the extension side by side, paired run by run: the time python takes to load each into a fresh
process, and a point query on a document through each (the numbers of docs/BENCHMARKS.md, "One core target").

  scripts/bench-extension-load.py DOCUMENT TABLE KEY_COLUMN LIBRARY_A LIBRARY_B [LOADS [QUERY_ROUNDS]]

LIBRARY_*: the extension's path without `.so` (as `load_extension` takes it). DOCUMENT is opened read-only through
`vfs=mdz`; each query round times 20,000 `SELECT * FROM TABLE WHERE KEY_COLUMN = ?` over keys 1 to 26. Run with
Debian's /usr/bin/python3 (its sqlite3 module loads extensions). Prints the medians.
"""
import statistics, subprocess, sys

document, table, key, *libraries = sys.argv[1:6]
loads = int(sys.argv[6]) if len(sys.argv) > 6 else 31
rounds = int(sys.argv[7]) if len(sys.argv) > 7 else 7
load = ("import sqlite3, sys, time; c = sqlite3.connect(':memory:'); c.enable_load_extension(True); "
        "t = time.perf_counter(); c.load_extension(sys.argv[1]); print((time.perf_counter() - t) * 1000)")
query = f"""import sqlite3, sys, time
l = sqlite3.connect(':memory:'); l.enable_load_extension(True); l.load_extension(sys.argv[1])
c = sqlite3.connect('file:' + sys.argv[2] + '?vfs=mdz&mode=ro', uri=True)
t = time.perf_counter()
for i in range(20000): c.execute('SELECT * FROM "{table}" WHERE "{key}" = ?', (i % 26 + 1,)).fetchone()
print((time.perf_counter() - t) / 20000 * 1e6)"""
python = sys.executable
times = {library: ([], []) for library in libraries}
for _ in range(loads):
    for library in libraries:
        times[library][0].append(float(subprocess.run([python, "-c", load, library], capture_output=True,
                                                      text=True, check=True).stdout))
for _ in range(rounds):
    for library in libraries:
        times[library][1].append(float(subprocess.run([python, "-c", query, library, document], capture_output=True,
                                                      text=True, check=True).stdout))
for library in libraries:
    print(f"{library}: load {statistics.median(times[library][0]):.2f} ms, "
          f"point query {statistics.median(times[library][1]):.2f} us")
