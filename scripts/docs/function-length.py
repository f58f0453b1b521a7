#!/usr/bin/env python3
"""Fails when a function, initializer or closure-free accessor body in Sources/, Tests/, Samples/ or Fuzz/ is longer
than the limit (80 lines), or when a function or initializer takes more than 8 parameters (group them into a value).

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


# Parameters a function or initializer may take.
PARAMETER_LIMIT = 8


def characters(code, line, index):
    """(line, index, character) from `index` of `line` on, to the end of the file."""
    while line < len(code):
        text = code[line]
        while index < len(text):
            yield line, index, text[index]
            index += 1
        line, index = line + 1, 0


def parameter_count(code, start, column):
    """The parameters of the declaration whose name ends at `column` of line `start` (0 for `()`): commas at the
    top level of its parameter list, found after any generic clause; `->` is not a closing angle bracket."""
    depth = 0
    commas = 0
    empty = True
    opened = False
    for line, index, char in characters(code, start, column):
        closing_angle = char == '>' and (index == 0 or code[line][index - 1] != '-')
        if not opened:
            if char == '<':
                depth += 1
            elif closing_angle:
                depth -= 1
            elif char == '(' and depth == 0:
                opened, depth = True, 1
            elif char == '{':
                return 0
            continue
        if char in '([<':
            depth += 1
        elif char in ')]' or closing_angle:
            depth -= 1
            if depth == 0:
                return 0 if empty else commas + 1
        elif char == ',' and depth == 1:
            commas += 1
        if not char.isspace():
            empty = False
    return 0


def wide_functions(path):
    """(line, count, name) of each declaration in `path` with more than PARAMETER_LIMIT parameters."""
    with open(path, encoding='utf-8') as handle:
        code = code_only(handle.read().split('\n'))
    found = []
    for start, line in enumerate(code):
        match = DECLARATION.match(line)
        if not match or match.group(1) == 'deinit':
            continue
        count = parameter_count(code, start, match.end(1))
        if count > PARAMETER_LIMIT:
            found.append((start + 1, count, match.group(1)))
    return found


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
                    for line, count, what in wide_functions(path):
                        failures.append(f'{os.path.relpath(path, root)}:{line}: {what} takes {count} parameters '
                                        f'(limit {PARAMETER_LIMIT})')
    for failure in failures:
        print(failure)
    if failures:
        print(f'{len(failures)} function(s) over {limit} lines or {PARAMETER_LIMIT} parameters: split them, or group '
              f'their parameters into a value (STYLE.md)', file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
