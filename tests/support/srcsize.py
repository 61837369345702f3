#!/usr/bin/env python3
"""Names every C file over a line limit and every function over a line limit.

usage: srcsize.py [--file-max N] [--func-max N] [--except PATH ...] FILE...

A function is counted from the line that opens its body's '{' at column 0
(or the signature line when the brace ends it) to its closing '}' at
column 0: the layout .clang-format gives every function in src/. Its name
is the identifier before the first '(' of the signature. Exit 1 when
anything is over, naming the file (and function) with its length; 0 else.
--except PATH leaves that file (its length and its functions) out (named, so the exception is
visible where it is made).
"""
import re
import sys

SIG = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")


def functions(path):
    """Yields (name, first line, length) for each top-level function body."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        line = re.sub(r"/\*.*?\*/|//.*", "", lines[i]).rstrip()
        if not re.match(r"[A-Za-z_]", line) or "(" not in line or line.startswith("typedef"):
            i += 1
            continue
        # the signature runs on to the line that opens the body
        k = i
        while k < len(lines) and k < i + 8 and not lines[k].rstrip().endswith((";", "{")):
            k += 1
            if k < len(lines) and not lines[k].startswith(" "):
                break  # a signature's later lines are indented
        if k >= len(lines) or not lines[k].rstrip().endswith("{") or "=" in line.split("(")[0]:
            i += 1
            continue
        j = k + 1
        while j < len(lines) and lines[j] != "}":
            j += 1
        m = SIG.search(line)
        if m and j < len(lines):
            yield m.group(1), i + 1, j - i + 1
        i = j + 1


def main(argv):
    file_max, func_max, exempt, files = 900, 80, set(), []
    k = 0
    while k < len(argv):
        a = argv[k]
        if a in ("--file-max", "--func-max", "--except"):
            if k + 1 >= len(argv):
                print(f"srcsize: {a} wants a value", file=sys.stderr)
                return 2
            v = argv[k + 1]
            if a == "--except":
                exempt.add(v)
            else:
                try:
                    n = int(v)
                except ValueError:
                    print(f"srcsize: {a} wants a number of lines, not '{v}'", file=sys.stderr)
                    return 2
                if a == "--file-max":
                    file_max = n
                else:
                    func_max = n
            k += 2
            continue
        files.append(a)
        k += 1
    over = 0
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            n = f.read().count("\n")
        if path in exempt:
            continue
        if n > file_max:
            print(f"{path}: {n} lines, over {file_max}")
            over += 1
        if not path.endswith(".c"):
            continue
        for name, first, length in functions(path):
            if length > func_max:
                print(f"{path}:{first}: {name} is {length} lines, over {func_max}")
                over += 1
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
