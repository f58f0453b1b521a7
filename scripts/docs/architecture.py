#!/usr/bin/env python3
"""Fails when the DocC article Architecture.md names a file or a type that the code does not have.

    scripts/docs/architecture.py [ARTICLE]

What it checks, in the article (default Sources/ManagedDocument/ManagedDocument.docc/Architecture.md):
- every path in backquotes that ends in `.swift` or names a folder (`Bundle/InPlace/`, `Support/FileIO.swift`) exists,
  under Sources/ManagedDocument/ (or, failing that, anywhere in the repository, for `scripts/...`), or, when it is a
  bare file name, somewhere under Sources/;
- every identifier in backquotes that looks like a type (UpperCamelCase with a lowercase letter, alone or before `.member`, `(`, `<`) is
  declared by a `struct`, `class`, `enum`, `protocol`, `actor` or `typealias` in Sources/, or is one of the few
  types of the dependencies the article names (EXTERNAL); for `Type.member`, a member of that name (a `func`, `var`,
  `let`, `case`, `init` or nested type) is declared in a file that declares or extends `Type`;
- every DocC symbol link (double backquotes) names a type declared in Sources/ (DocC checks the rest of the link
  when it builds the catalog).
Run by scripts/docs.sh; exit 0 when clean, 1 listing what is missing.
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ROOT / "Sources"
LIBRARY = SOURCES / "ManagedDocument"
CORE = SOURCES / "MDZCore"  # the reading core: a layer's folder may sit in either target
ARTICLE = LIBRARY / "ManagedDocument.docc" / "Architecture.md"

# Types of the dependencies and the platform that the article names on purpose.
EXTERNAL = {"Mutex", "Stat", "FileDescriptor", "Errno", "FilePath", "DatabaseQueue", "DatabasePool",
            "DatabaseMigrator", "Database", "Sendable", "Thread", "DispatchSemaphore", "DispatchQueue", "Logger",
            "SHA256", "Task", "AsyncStream", "Data", "Date", "URL", "Value", "UIManagedDocument", "UIDocument",
            "ValueObservation", "TransactionObserver", "UUID", "FoundationEssentials", "DatabaseError", "DatabaseReader",
            "DatabaseWriter"}
# The package's targets, which the article names as modules.
EXTERNAL |= set(re.findall(r'name: "(\w+)"', (ROOT / "Package.swift").read_text()))

TYPE_DECLARATION = re.compile(r"\b(?:struct|class|enum|protocol|actor|typealias)\s+([A-Z]\w*)")
MEMBER_DECLARATION = re.compile(r"\b(?:func|var|let|case|struct|class|enum|protocol|typealias)\s+`?(\w+)")
INITIALIZER = re.compile(r"\binit\b")
CODE_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
SYMBOL_LINK = re.compile(r"``([^`\n]+)``")
TYPE_TOKEN = re.compile(r"^([A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*)(?:\.([A-Za-z_]\w*))?(?:[(<].*)?$")


def declarations():
    """The types declared in Sources/, and for each the members declared in the files that declare or extend it."""
    types, members = set(), {}
    for path in SOURCES.rglob("*.swift"):
        text = path.read_text(errors="replace")
        types.update(TYPE_DECLARATION.findall(text))
        declared = set(MEMBER_DECLARATION.findall(text)) | ({"init"} if INITIALIZER.search(text) else set())
        for owner in re.findall(r"\b(?:struct|class|enum|protocol|actor|extension)\s+([A-Z]\w*)", text):
            members.setdefault(owner, set()).update(declared)
    return types, members


def path_exists(token: str, file_names: set[str]) -> bool:
    candidate = token.rstrip("/")
    if "/" not in candidate and not token.endswith("/"):
        return candidate in file_names
    return any((base / candidate).exists() for base in (LIBRARY, CORE, SOURCES, ROOT))


def main() -> int:
    article = Path(sys.argv[1]) if len(sys.argv) > 1 else ARTICLE
    text = article.read_text()
    types, members = declarations()
    file_names = {p.name for p in SOURCES.rglob("*.swift")}
    problems = []
    for number, line in enumerate(text.split("\n"), start=1):
        # Symbol links first, then the single-backquoted spans left once they are blanked out.
        for link in SYMBOL_LINK.findall(line):
            head = re.split(r"[/.(<]", link, maxsplit=1)[0]
            if head and head[0].isupper() and head not in types and head not in EXTERNAL:
                problems.append(f"{article.name}:{number}: ``{link}``: no type {head} in Sources/")
        for span in CODE_SPAN.findall(SYMBOL_LINK.sub("", line)):
            token = span.strip()
            if token.endswith(".swift") or (token.endswith("/") and re.fullmatch(r"[\w./+-]+", token)):
                if not path_exists(token, file_names):
                    problems.append(f"{article.name}:{number}: `{token}`: no such file or folder")
                continue
            match = TYPE_TOKEN.match(token)
            if not match or " " in token.split("(")[0]:
                continue
            name, member = match.group(1), match.group(2)
            if name in EXTERNAL:
                continue
            if name not in types:
                problems.append(f"{article.name}:{number}: `{token}`: no type {name} in Sources/")
            elif member and member not in members.get(name, set()):
                problems.append(f"{article.name}:{number}: `{token}`: {name} has no member {member}")
    for problem in problems:
        print(problem)
    if problems:
        print(f"architecture: {len(problems)} name(s) in {article.name} that the code does not have")
        return 1
    print(f"architecture: every file and type {article.name} names exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
