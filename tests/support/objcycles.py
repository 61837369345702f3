#!/usr/bin/env python3
"""Finds call cycles among object files: which object defines what, which
references what (nm), the graph "A needs B" when A references a symbol B
defines, and every strongly connected part of it with more than one file.

  tests/support/objcycles.py [--name LABEL] FILE...    (objects, or archives of them)

Exit 0 and a one-line summary when there is no cycle; exit 1 naming each
cycle with the symbols that make it, as
  cycle: http.c.o -> routes.c.o (srv_route_allow) -> http.c.o (srv_send_err)
exit 2 on bad usage or when nm fails. NM names another nm."""
import os
import subprocess
import sys
from collections import defaultdict, deque

DEFINED = set("TDBRVWGSCi")  # global (upper case) definitions, and indirect functions


def symbols(path, nm):
    """{object name: (defined set, referenced set)} for an object or archive."""
    try:
        out = subprocess.run([nm, "-A", "-P", path], check=True, capture_output=True,
                             text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"objcycles: {nm} {path}: {getattr(e, 'stderr', '') or e}".strip())
    objs = defaultdict(lambda: (set(), set()))
    for line in out.splitlines():
        # "lib.a[x.c.o]: sym T addr size" or "x.o: sym U"
        head, _, rest = line.partition(": ")
        f = rest.split()
        if len(f) < 2:
            continue
        name = head[head.index("[") + 1:-1] if head.endswith("]") and "[" in head else \
            os.path.basename(head)
        sym, kind = f[0], f[1]
        if kind == "U":
            objs[name][1].add(sym)
        elif kind in DEFINED:
            objs[name][0].add(sym)
    return objs


def graph(objs):
    """edges[a][b] = sorted symbols a references that b defines (a != b)."""
    owner = defaultdict(list)
    for o, (d, _) in objs.items():
        for s in d:
            owner[s].append(o)
    edges = defaultdict(dict)
    for a, (_, u) in objs.items():
        for s in u:
            for b in owner.get(s, ()):
                if b != a:
                    edges[a].setdefault(b, []).append(s)
    for a in edges:
        for b in edges[a]:
            edges[a][b].sort()
    return edges


def sccs(nodes, edges):
    """Tarjan's strongly connected components, iteratively."""
    index, low, on, stack, out, n = {}, {}, set(), [], [], [0]
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, {}))))]
        index[root] = low[root] = n[0]
        n[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = n[0]
                    n[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, {})))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    out.append(sorted(comp))
    return out


def shortest_cycle(start, comp, edges):
    """The shortest path start -> ... -> start inside comp."""
    inside = set(comp)
    prev, q = {}, deque([start])
    seen = {start}
    while q:
        v = q.popleft()
        for w in sorted(edges.get(v, {})):
            if w not in inside:
                continue
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [start]
            if w not in seen:
                seen.add(w)
                prev[w] = v
                q.append(w)
    return [start, start]


def describe(path, edges):
    text = path[0]
    for a, b in zip(path, path[1:]):
        syms = edges[a][b]
        more = f" +{len(syms) - 2}" if len(syms) > 2 else ""
        text += f" -> {b} ({', '.join(syms[:2])}{more})"
    return text


def main(argv):
    label, files = "objects", []
    it = iter(argv)
    for a in it:
        if a == "--name":
            label = next(it, None) or sys.exit("objcycles: --name needs a value")
        elif a.startswith("-"):
            print(__doc__, file=sys.stderr)
            return 2
        else:
            files.append(a)
    if not files:
        print(__doc__, file=sys.stderr)
        return 2
    nm = os.environ.get("NM", "nm")
    objs = {}
    for f in files:
        objs.update(symbols(f, nm))
    edges = graph(objs)
    cycles = [c for c in sccs(objs.keys(), edges) if len(c) > 1]
    if not cycles:
        n = sum(len(v) for v in edges.values())
        print(f"objcycles: {label}: {len(objs)} objects, {n} file dependencies, no cycle")
        return 0
    print(f"objcycles: {label}: {len(cycles)} cycle{'s' if len(cycles) > 1 else ''} among "
          f"its objects", file=sys.stderr)
    for c in cycles:
        print(f"  cycle: {describe(shortest_cycle(c[0], c, edges), edges)}"
              + (f"  [all of: {' '.join(c)}]" if len(c) > 2 else ""), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
