#!/usr/bin/env python3
"""memory_layering: the files of src/memory call each other in one direction.

Derives the file-level call graph of the memory room from its static library
(`nm -A -P`: which member defines, and which uses, each global symbol) and
fails on:
  - a cycle between files (named with the symbols that close it: a.c -> b.c
    (via mem__x) -> a.c (via mem__y));
  - a global symbol that is neither public (`ebb_`), the room's interface to
    the rooms above it (`mem_`, issue 34) nor a cross-file internal of the
    room (`mem__`): a helper that should be `static`;
  - a `mem__` symbol that no other file of the room uses: it should be static
    (or it is dead);
  - an `ebb_` or `mem__` name defined in no file but used (nothing to check
    against; reported as a broken build, not a layering fault).
On success prints the files by level (a file only calls files on lower
levels). $NM names the nm to run (ctest passes CMake's).
Usage: memory_layering.py LIBEBB_MEMORY.a
              memory_layering.py --selftest   (the checker finds a planted cycle)
"""
import os
import re
import subprocess
import sys

GLOBAL_DEFINED = set("TDBRCVWGSi")


def parse_nm(text):
    """{member: (defined set, used set)} from `nm -A -P` output."""
    files = {}
    pat = re.compile(r"^[^\[]*\[([^\]]+)\]:\s+(\S+)\s+([A-Za-z])")
    for line in text.splitlines():
        m = pat.match(line)
        if not m:
            continue
        member, sym, kind = m.group(1), m.group(2), m.group(3)
        name = member[:-2] if member.endswith(".o") else member
        d, u = files.setdefault(name, (set(), set()))
        if kind == "U":
            u.add(sym)
        elif kind in GLOBAL_DEFINED:
            d.add(sym)
    return files


def call_graph(files):
    """{a: {b: [symbols a uses that b defines]}} and the definer of each name."""
    definer = {}
    for f, (d, _) in files.items():
        for s in d:
            definer[s] = f
    graph = {f: {} for f in files}
    for f, (_, u) in files.items():
        for s in sorted(u):
            g = definer.get(s)
            if g and g != f:
                graph[f].setdefault(g, []).append(s)
    return graph, definer


def find_cycle(graph):
    """One cycle as a list of files [a, b, ..., a], or None."""
    state, stack = {}, []

    def visit(f):
        state[f] = 1
        stack.append(f)
        for g in sorted(graph[f]):
            if state.get(g) == 1:
                return stack[stack.index(g):] + [g]
            if not state.get(g):
                c = visit(g)
                if c:
                    return c
        stack.pop()
        state[f] = 2
        return None

    for f in sorted(graph):
        if not state.get(f):
            c = visit(f)
            if c:
                return c
    return None


def levels(graph):
    """Level of each file: 0 calls nothing, else 1 + the highest it calls."""
    memo = {}

    def level(f):
        if f not in memo:
            memo[f] = 1 + max((level(g) for g in graph[f]), default=-1)
        return memo[f]

    for f in graph:
        level(f)
    return memo


def check(files):
    """Problems found, as lines; empty when the layering holds."""
    problems = []
    graph, definer = call_graph(files)
    # every cycle named: after one is found, its closing edge is set aside
    # and the search runs again (bounded by the number of edges)
    rest = {f: dict(e) for f, e in graph.items()}
    for _ in range(sum(len(e) for e in graph.values())):
        cycle = find_cycle(rest)
        if not cycle:
            break
        hops = " -> ".join(
            "%s (via %s)" % (b, ", ".join(graph[a][b][:3])) for a, b in zip(cycle, cycle[1:]))
        problems.append("call cycle between files: %s -> %s" % (cycle[0], hops))
        del rest[cycle[-2]][cycle[-1]]
    used_elsewhere = {}
    for f, (_, u) in files.items():
        for s in u:
            if s in definer and definer[s] != f:
                used_elsewhere.setdefault(s, set()).add(f)
    for f, (d, _) in sorted(files.items()):
        for s in sorted(d):
            if s.startswith("mem__"):
                if s not in used_elsewhere:
                    problems.append("%s: '%s' is used by no other file of the room: make it "
                                    "static" % (f, s))
            elif not s.startswith(("ebb_", "mem_")):
                problems.append("%s: global '%s' is neither public (ebb_), the room's interface "
                                "(mem_) nor a cross-file internal (mem__): make it static"
                                % (f, s))
    for f, (_, u) in sorted(files.items()):
        for s in sorted(u):
            if s.startswith("mem__") and s not in definer:
                problems.append("%s: uses '%s', which no file of the room defines" % (f, s))
    return problems


def report_levels(files):
    graph, _ = call_graph(files)
    lv = levels(graph)
    for n in sorted(set(lv.values()), reverse=True):
        print("level %d: %s" % (n, " ".join(sorted(f for f in lv if lv[f] == n))))


SELFTEST_NM = """\
lib.a[a.c.o]: mem__a T 0 10
lib.a[a.c.o]: mem__b U
lib.a[b.c.o]: mem__b T 0 10
lib.a[b.c.o]: mem__c U
lib.a[c.c.o]: mem__c T 0 10
lib.a[c.c.o]: mem__a U
lib.a[c.c.o]: helper T 0 10
lib.a[c.c.o]: mem__lonely T 0 10
lib.a[d.c.o]: ebb_d T 0 10
lib.a[d.c.o]: mem__c U
"""


def selftest():
    """The checker must name a planted cycle and the misnamed globals."""
    problems = check(parse_nm(SELFTEST_NM))
    want = [
        "call cycle between files: a.c -> b.c (via mem__b) -> c.c (via mem__c) -> a.c (via mem__a)",
        "c.c: global 'helper' is neither public",
        "c.c: 'mem__lonely' is used by no other file",
    ]
    ok = True
    for w in want:
        if not any(p.startswith(w) for p in problems):
            print("selftest: the checker did not report: %s\n  it reported: %s" % (w, problems))
            ok = False
    good = parse_nm(SELFTEST_NM.replace("lib.a[c.c.o]: mem__a U\n", "")
                    .replace("lib.a[a.c.o]: mem__a T 0 10\n", "")
                    .replace("lib.a[c.c.o]: helper T 0 10\n", "")
                    .replace("lib.a[c.c.o]: mem__lonely T 0 10\n", ""))
    if check(good):
        print("selftest: a layered listing was reported: %s" % check(good))
        ok = False
    return ok


def main(argv):
    if len(argv) != 2:
        print("usage: memory_layering.py LIBEBB_MEMORY.a | --selftest", file=sys.stderr)
        return 2
    if not selftest():
        return 1
    if argv[1] == "--selftest":
        print("selftest passed")
        return 0
    try:
        out = subprocess.run([os.environ.get("NM") or "nm", "-A", "-P", argv[1]], check=True, capture_output=True,
                             text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        print("memory_layering: cannot run nm on %s: %s" % (argv[1], e), file=sys.stderr)
        return 1
    files = parse_nm(out)
    if len(files) < 2:
        print("memory_layering: %s lists %d object files; expected the memory room's"
              % (argv[1], len(files)), file=sys.stderr)
        return 1
    problems = check(files)
    for p in problems:
        print("memory_layering: " + p, file=sys.stderr)
    if problems:
        return 1
    report_levels(files)
    print("memory_layering: %d files, no call cycle" % len(files))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
