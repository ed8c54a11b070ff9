#!/usr/bin/env python3
"""Holds the server, storage and ledger to their size limits (issue 50): no file over 400
lines and no function over 60 lines. Prints the largest file and the longest function of each
module, and every breach; exits 1 on a breach.

A function is a `func`, `init`, `deinit`, `subscript` or a computed property's body: counted from its declaration line to the line of its closing brace. Braces in
strings and comments are skipped (string literals, multi-line strings, `//` and `/* */`).

    python3 scripts/check-sizes.py [--files N] [--functions N] [MODULE_DIR ...]
"""
import argparse
import os
import re
import sys

MODULES = ["Sources/CountersignServer", "Sources/CountersignStorage", "Sources/CountersignLedger", "Sources/CountersignCharts"]
DECLARATION = re.compile(r"^\s*(?:@\w+(?:\([^)]*\))?\s+)*(?:(?:public|private|fileprivate|internal|package|static|class|final|"
                         r"override|mutating|nonisolated|convenience|required|@\w+)\s+)*(func\s+[^\s(<]+|init[?!]?|deinit|subscript|var\s+\w+(?=\s*:[^=]*\{\s*$))")


def code_only(lines):
    """The lines with string contents and comments blanked, so only real braces remain."""
    out = []
    in_block = False
    in_multiline = False
    for line in lines:
        result = []
        i = 0
        in_string = False
        while i < len(line):
            c = line[i]
            if in_block:
                if line.startswith("*/", i):
                    in_block = False
                    i += 2
                else:
                    i += 1
                continue
            if in_multiline:
                if line.startswith('"""', i):
                    in_multiline = False
                    i += 3
                else:
                    i += 1
                continue
            if in_string:
                if c == "\\":
                    i += 2
                    continue
                if c == '"':
                    in_string = False
                i += 1
                continue
            if line.startswith("//", i):
                break
            if line.startswith("/*", i):
                in_block = True
                i += 2
                continue
            if line.startswith('"""', i):
                in_multiline = True
                i += 3
                continue
            if c == '"':
                in_string = True
                i += 1
                continue
            result.append(c)
            i += 1
        out.append("".join(result))
    return out


def functions(path):
    """(name, first line, length) of each function body in the file."""
    with open(path, encoding="utf-8") as handle:
        raw = handle.read().split("\n")
    code = code_only(raw)
    found = []
    for start, line in enumerate(code):
        match = DECLARATION.match(line)
        if not match:
            continue
        depth = 0
        opened = False
        for end in range(start, len(code)):
            for c in code[end]:
                if c == "{":
                    depth += 1
                    opened = True
                elif c == "}":
                    depth -= 1
            if opened and depth <= 0:
                found.append((match.group(1), start + 1, end - start + 1))
                break
            # A protocol requirement or a declaration without a body ends at its line.
            if not opened and end > start and not code[end].strip().startswith(("->", "throws", "async", "where", ")")) and "{" not in code[end]:
                if code[end].strip() and not code[end - 1].rstrip().endswith((",", "(")):
                    break
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=400, help="largest file allowed, in lines")
    parser.add_argument("--functions", type=int, default=60, help="longest function allowed, in lines")
    parser.add_argument("modules", nargs="*", default=MODULES)
    options = parser.parse_args()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    breaches = []
    for module in options.modules:
        largest = ("", 0)
        longest = ("", "", 0, 0)
        for directory, _, names in os.walk(os.path.join(root, module)):
            for name in sorted(names):
                if not name.endswith(".swift"):
                    continue
                path = os.path.join(directory, name)
                relative = os.path.relpath(path, root)
                with open(path, encoding="utf-8") as handle:
                    count = sum(1 for _ in handle)
                if count > largest[1]:
                    largest = (relative, count)
                if count > options.files:
                    breaches.append(f"{relative}: {count} lines (at most {options.files})")
                for function, line, length in functions(path):
                    if length > longest[3]:
                        longest = (relative, function, line, length)
                    if length > options.functions:
                        breaches.append(f"{relative}:{line}: {function} is {length} lines (at most {options.functions})")
        print(f"{module}: largest file {largest[0]} ({largest[1]} lines); longest function {longest[1]} at {longest[0]}:{longest[2]} ({longest[3]} lines)")
    sys.stdout.flush()
    for breach in breaches:
        print("over the limit: " + breach, file=sys.stderr)
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())
