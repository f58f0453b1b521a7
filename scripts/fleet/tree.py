#!/usr/bin/env python3
"""Makes and checks trees of legacy stores for the fleet scripts (scripts/fleet-slurm.sh, scripts/bench-fleet.sh).

  tree.py make ROOT --stores N [--others M] [--samples DIR] [--corpus DIR] [--seed S] [--no-corrupt] > manifest.json
  tree.py check ROOT MANIFEST MERGED_REPORT [--failed-under PREFIX] [--attempts-converted N]

`make` writes N generated stores (plain rollback-journal stores, WAL stores whose rows are only in the -wal, and
copies of the project's sample stores of every kind: Core Data with a -wal, a hot -journal, a UIManagedDocument
package, plain stores) in nested folders, plus the corpus stores and packages when DIR exists, plus things that are
not stores (text, JSON, an empty file, a text file named .sqlite, an orphan -wal) and one corrupt store (none with
--no-corrupt, for a run that must convert every store). The
manifest gives every item the walk must report, its expected outcome, and for stores the digest of their rows as
SQLite reads them (computed on a scratch copy with the sidecars: a WAL store is never opened in place).

`check` compares a tree after `docconvert batch` and the merged report with the manifest: every item reported
exactly once with its outcome and nothing else reported (a report file reported as an item fails), every store's
bundle holding the same rows (digests table by table), every store's legacy files in exactly one backup, things
that are not stores untouched. Exit 0 when all holds; else 1 with one line per problem.
"""
import argparse, hashlib, json, os, random, shutil, sqlite3, sys, tempfile, zipfile

SQLITE = b"SQLite format 3\x00"
SIDECARS = ("-wal", "-shm", "-journal")


def row_digest(store):
    """Table name -> SHA-256 of its rows (sorted reprs), for a copy of `store` and its sidecars."""
    with tempfile.TemporaryDirectory() as scratch:
        copy = os.path.join(scratch, "store")
        shutil.copyfile(store, copy)
        for suffix in SIDECARS:
            if os.path.exists(store + suffix):
                shutil.copyfile(store + suffix, copy + suffix)
        return digest_of(copy)


def digest_of(path):
    connection = sqlite3.connect(path)
    try:
        tables = [name for (name,) in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
        result = {}
        for table in tables:
            rows = sorted(repr(row) for row in connection.execute(f'SELECT * FROM "{table}"'))
            result[table] = hashlib.sha256("\n".join(rows).encode()).hexdigest()
        return result
    finally:
        connection.close()


def file_digest(path):
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def make(args):
    rng = random.Random(args.seed)
    root = os.path.abspath(args.root)
    os.makedirs(root, exist_ok=True)
    items = {}
    work = tempfile.mkdtemp(prefix="fleet-tree-")

    def folder_for(number):
        relative = f"home/user{number % 97:02d}/Library/Group{number % 7}"
        os.makedirs(os.path.join(root, relative), exist_ok=True)
        return relative

    def add_store(relative, path, kind):
        store = os.path.join(path, "StoreContent", "persistentStore") if kind == "package" else path
        items[relative] = {"outcome": "converted", "kind": kind, "rows": row_digest(store)}

    samples = []
    if args.samples and os.path.isdir(args.samples):
        for name in sorted(os.listdir(args.samples)):
            if name.endswith(SIDECARS) or name.startswith("."):
                continue  # sidecars and Core Data support folders travel with their store
            samples.append(name)

    for number in range(args.stores):
        folder = folder_for(number)
        choice = number % 5
        if choice == 4 and samples:
            name = samples[number // 5 % len(samples)]
            base, ext = os.path.splitext(name)
            target_name = f"{base}-{number}{ext}"
            source = os.path.join(args.samples, name)
            target = os.path.join(root, folder, target_name)
            if os.path.isdir(source):
                shutil.copytree(source, target)
                add_store(f"{folder}/{target_name}", target, "package")
            else:
                shutil.copyfile(source, target)
                for suffix in SIDECARS:
                    if os.path.exists(source + suffix):
                        shutil.copyfile(source + suffix, target + suffix)
                support = os.path.join(args.samples, f".{base}_SUPPORT")
                if os.path.isdir(support):
                    shutil.copytree(support, os.path.join(root, folder, f".{base}-{number}_SUPPORT"))
                add_store(f"{folder}/{target_name}", target, "sample")
            continue
        name = f"store-{number}.sqlite" if number % 3 else f"Notes{number}.db"
        target = os.path.join(root, folder, name)
        rows = rng.randint(3, 60)
        if choice == 1:
            # Rows only in the -wal: written with checkpoints off, copied while the connection still holds them.
            scratch = os.path.join(work, f"wal-{number}.sqlite")
            connection = sqlite3.connect(scratch)
            connection.execute("PRAGMA journal_mode = WAL")
            connection.execute("PRAGMA wal_autocheckpoint = 0")
            connection.execute("CREATE TABLE IF NOT EXISTS seed (id INTEGER PRIMARY KEY)")
            connection.commit()
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            connection.execute("CREATE TABLE note (id INTEGER PRIMARY KEY, text TEXT, score REAL, data BLOB)")
            for row in range(rows):
                connection.execute("INSERT INTO note (text, score, data) VALUES (?, ?, ?)",
                                   (f"wal note {number}.{row}", rng.random(), rng.randbytes(rng.randint(0, 64))))
            connection.commit()
            shutil.copyfile(scratch, target)
            shutil.copyfile(scratch + "-wal", target + "-wal")
            connection.close()
        else:
            connection = sqlite3.connect(target)
            connection.execute("CREATE TABLE note (id INTEGER PRIMARY KEY, text TEXT, score REAL, data BLOB)")
            connection.execute("CREATE TABLE tag (name TEXT PRIMARY KEY, note INTEGER) WITHOUT ROWID")
            for row in range(rows):
                connection.execute("INSERT INTO note (text, score, data) VALUES (?, ?, ?)",
                                   (f"note {number}.{row} " + "x" * rng.randint(0, 200), rng.random(),
                                    rng.randbytes(rng.randint(0, 128))))
                connection.execute("INSERT INTO tag VALUES (?, ?)", (f"tag-{row}", row))
            connection.commit()
            connection.close()
        add_store(f"{folder}/{name}", target, "wal" if choice == 1 else "plain")

    if args.corpus and os.path.isdir(args.corpus):
        for part in ("coredata", "packages"):
            source = os.path.join(args.corpus, part)
            if not os.path.isdir(source):
                continue
            shutil.copytree(source, os.path.join(root, "corpus", part))
        base = os.path.join(root, "corpus")
        for folder, folders, files in os.walk(base):
            relative_folder = os.path.relpath(folder, root)
            if os.path.isfile(os.path.join(folder, "StoreContent", "persistentStore")):
                add_store(relative_folder, folder, "package")
                folders[:] = []
                continue
            folders[:] = [name for name in folders if not (name.startswith(".") and name.endswith("_SUPPORT"))]
            for name in files:
                path = os.path.join(folder, name)
                relative = f"{relative_folder}/{name}"
                if name.endswith(SIDECARS):
                    store = path[: -len(next(s for s in SIDECARS if name.endswith(s)))]
                    if not os.path.exists(store):
                        items[relative] = {"outcome": "not-a-store", "sha256": file_digest(path)}
                    continue
                with open(path, "rb") as handle:
                    header = handle.read(16)
                if header == SQLITE:
                    add_store(relative, path, "corpus")
                else:
                    items[relative] = {"outcome": "not-a-store", "sha256": file_digest(path)}

    others = {
        "home/readme.txt": b"not a store\n",
        "home/user00/settings.json": b'{"theme": "dark"}\n',
        "home/user01/empty.sqlite": b"",
        "home/user02/fake.sqlite": b"this is text named like a store\n" * 3,
        "home/user03/orphan.sqlite-wal": b"\x37\x7f\x06\x82" + bytes(28),
        "home/user04/photo.jpg": bytes(rng.randrange(256) for _ in range(2048)),
    }
    for relative, data in others.items():
        path = os.path.join(root, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(data)
        items[relative] = {"outcome": "not-a-store", "sha256": file_digest(path)}
    # Everything else a home folder holds: small files that are not stores, a few dozen per folder.
    extensions = (".txt", ".json", ".png", ".md", ".csv", ".plist", ".log", "")
    for number in range(args.others):
        relative = f"home/user{number % 97:02d}/Documents/d{number // 40 % 4000:04d}/file-{number}{extensions[number % len(extensions)]}"
        path = os.path.join(root, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        data = (f"file {number}\n" * rng.randint(1, 40)).encode() if number % 4 else rng.randbytes(rng.randint(0, 3000))
        if data.startswith(SQLITE):
            data = b"x" + data
        with open(path, "wb") as handle:
            handle.write(data)
        items[relative] = {"outcome": "not-a-store", "sha256": hashlib.sha256(data).hexdigest()}
    if args.corrupt:
        corrupt = "home/user05/Damaged.sqlite"
        path = os.path.join(root, corrupt)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(SQLITE + bytes([0x10, 0x00, 1, 1, 0, 64, 32, 32]) + bytes(rng.randrange(256) for _ in range(8192)))
        items[corrupt] = {"outcome": "failed", "sha256": file_digest(path)}
    shutil.rmtree(work)
    json.dump({"root": root, "items": items}, sys.stdout, indent=1, sort_keys=True)


def bundle_rows(bundle):
    with zipfile.ZipFile(bundle) as archive, tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "store")
        with archive.open("StoreContent/persistentStore") as entry, open(path, "wb") as out:
            shutil.copyfileobj(entry, out)
        return digest_of(path)


def check(args):
    with open(args.manifest) as handle:
        manifest = json.load(handle)
    with open(args.report) as handle:
        report = json.load(handle)
    root = os.path.abspath(args.root)
    expected = manifest["items"]
    problems = []
    reported = {}
    for item in report["items"]:
        if item["source"] in reported:
            problems.append(f"{item['source']}: reported twice")
        reported[item["source"]] = item
    for source in sorted(set(reported) - set(expected)):
        problems.append(f"{source}: reported ({reported[source]['outcome']}) but not an item of the tree")
    for source in sorted(set(expected) - set(reported)):
        problems.append(f"{source}: missing from the report")
    converted = 0
    for source, facts in sorted(expected.items()):
        item = reported.get(source)
        if item is None:
            continue
        want = facts["outcome"]
        if args.failed_under and source.startswith(args.failed_under) and want == "converted":
            want = "failed"
        got = item["outcome"]
        if want == "converted":
            if got not in ("converted", "skipped-already-done"):
                problems.append(f"{source}: {got}, expected converted ({(item.get('error') or {}).get('message', '')})")
                continue
            converted += got == "converted"
            bundle = os.path.join(root, item.get("bundle") or "")
            if not os.path.isfile(bundle):
                problems.append(f"{source}: its bundle {item.get('bundle')} is not there")
                continue
            rows = bundle_rows(bundle)
            if rows != facts["rows"]:
                lost = sorted(t for t in facts["rows"] if rows.get(t) != facts["rows"][t])
                problems.append(f"{source}: the bundle's rows differ from the store's in {lost or sorted(rows)}")
            if os.path.exists(os.path.join(root, source)):
                problems.append(f"{source}: the legacy store is still there after conversion")
            parent, name = os.path.split(os.path.join(root, source))
            backups = os.path.join(parent, "docconvert-backup")
            copies = [entry for entry in os.listdir(backups) if entry.startswith(name + ".")] if os.path.isdir(backups) else []
            if len(copies) != 1:
                problems.append(f"{source}: {len(copies)} backups of its legacy files, expected exactly 1")
        else:
            if got != want:
                problems.append(f"{source}: {got}, expected {want}")
            path = os.path.join(root, source)
            if want == "failed" and args.failed_under and source.startswith(args.failed_under):
                pass
            if "sha256" in facts and (not os.path.isfile(path) or file_digest(path) != facts["sha256"]):
                problems.append(f"{source}: changed or removed, but it is not a store")
            if "rows" in facts and not os.path.exists(path):
                problems.append(f"{source}: the legacy store is gone though its conversion failed")
    for folder, folders, files in os.walk(root):
        for name in files:
            if name.endswith(".partial") or ".partial.d" in folder:
                problems.append(f"{os.path.relpath(os.path.join(folder, name), root)}: a temporary was left behind")
    if args.converted is not None and args.converted != converted:
        problems.append(f"the report says {converted} items converted, expected {args.converted}")
    summary = report.get("summary", {})
    if summary.get("items") != len(expected):
        problems.append(f"the merged summary counts {summary.get('items')} items, the tree has {len(expected)}")
    for problem in problems[:50]:
        print(f"check: {problem}", file=sys.stderr)
    if len(problems) > 50:
        print(f"check: … and {len(problems) - 50} more", file=sys.stderr)
    stores = sum(1 for facts in expected.values() if facts["outcome"] == "converted")
    print(f"check: {len(expected)} items ({stores} stores): {'OK' if not problems else f'{len(problems)} problems'}",
          file=sys.stderr)
    return 0 if not problems else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    maker = commands.add_parser("make")
    maker.add_argument("root")
    maker.add_argument("--stores", type=int, default=300)
    maker.add_argument("--others", type=int, default=0, help="small files that are not stores, as a home tree holds")
    maker.add_argument("--samples")
    maker.add_argument("--corpus")
    maker.add_argument("--seed", type=int, default=1)
    maker.add_argument("--no-corrupt", dest="corrupt", action="store_false", help="leave the corrupt store out")
    checker = commands.add_parser("check")
    checker.add_argument("root")
    checker.add_argument("manifest")
    checker.add_argument("report")
    checker.add_argument("--failed-under", help="stores under this relative prefix must have failed")
    checker.add_argument("--converted", type=int, help="the number of items the report must show converted")
    args = parser.parse_args()
    if args.command == "make":
        make(args)
        return 0
    return check(args)


if __name__ == "__main__":
    sys.exit(main())
