#!/usr/bin/env python3
"""Fails when a function, initializer or closure-free accessor body in Sources/, Tests/, Samples/ or Fuzz/ is longer
than the limit (80 lines).

    scripts/docs/function-length.py [--limit N] [ROOT]

A body is counted from the line of its `func`/`init`/`deinit` keyword to the line of its closing brace. Braces inside
string literals (single-line and multi-line) and comments are ignored. Hidden folders (a build folder such as
Fuzz/.build) are not read. Run by scripts/docs.sh.
"""
import os
import re
import sys

DECLARATION = re.compile(r'^\s*(?:@\w+(?:\([^)]*\))?\s+)*(?:(?:public|private|fileprivate|internal|package|open|'
                         r'static|class|final|override|mutating|nonmutating|convenience|required|nonisolated|'
                         r'@inlinable|@discardableResult)\s+)*(func\s+[^\s(<]+|init[?!]?|deinit)\b')

# The folders whose Swift files are read: the library and tool, their tests, the samples and the fuzz targets.
FOLDERS = ['Sources', 'Tests', 'Samples', 'Fuzz']


def code_only(lines):
    """Each line with string literals and comments blanked out (brace counting needs code alone)."""
    out = []
    in_block = False
    in_multiline = False
    for line in lines:
        result = []
        i = 0
        while i < len(line):
            if in_block:
                end = line.find('*/', i)
                if end < 0:
                    i = len(line)
                else:
                    in_block = False
                    i = end + 2
                continue
            if in_multiline:
                end = line.find('"""', i)
                if end < 0:
                    i = len(line)
                else:
                    in_multiline = False
                    i = end + 3
                continue
            if line.startswith('//', i):
                break
            if line.startswith('/*', i):
                in_block = True
                i += 2
                continue
            if line.startswith('"""', i):
                in_multiline = True
                i += 3
                continue
            if line[i] == '"':
                i += 1
                while i < len(line) and line[i] != '"':
                    i += 2 if line[i] == '\\' else 1
                i += 1
                continue
            result.append(line[i])
            i += 1
        out.append(''.join(result))
    return out


def long_functions(path, limit):
    with open(path, encoding='utf-8') as handle:
        lines = handle.read().split('\n')
    code = code_only(lines)
    found = []
    for start, line in enumerate(code):
        match = DECLARATION.match(line)
        if not match:
            continue
        depth = 0
        opened = False
        for index in range(start, len(code)):
            for char in code[index]:
                if char == '{':
                    depth += 1
                    opened = True
                elif char == '}':
                    depth -= 1
            if opened and depth <= 0:
                length = index - start + 1
                if length > limit:
                    found.append((start + 1, length, match.group(1)))
                break
            if not opened and index > start and code[index].strip() == '':
                break  # a protocol requirement: no body
    return found


def main():
    args = sys.argv[1:]
    limit = 80
    if args[:1] == ['--limit']:
        limit = int(args[1])
        args = args[2:]
    root = args[0] if args else os.path.join(os.path.dirname(__file__), '..', '..')
    failures = []
    for top in FOLDERS:
        for folder, subfolders, files in os.walk(os.path.join(root, top)):
            subfolders[:] = sorted(name for name in subfolders if not name.startswith('.'))
            for name in sorted(files):
                if name.endswith('.swift'):
                    path = os.path.join(folder, name)
                    for line, length, what in long_functions(path, limit):
                        failures.append(f'{os.path.relpath(path, root)}:{line}: {what} is {length} lines '
                                        f'(limit {limit})')
    for failure in failures:
        print(failure)
    if failures:
        print(f'{len(failures)} function(s) over {limit} lines: split them (STYLE.md)', file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
