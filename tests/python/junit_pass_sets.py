"""Compares two pytest runs of the same tests (--junitxml), one with the
framework's own allocator (REFERENCE) and one with ebb's plug-in
(CANDIDATE): exit 0 when every test that passed in the first passed in the
second, and both ran the same tests; otherwise names each test lost, with
its message from the candidate run. No count is fixed here.

  junit_pass_sets.py REFERENCE.xml CANDIDATE.xml [LAUNCHES.tsv ...]

On the fake GPU a kernel launch does nothing (the fake keeps bytes, not
arithmetic), so a test that launched one computed from whatever the memory
held and its outcome depends on which allocator handed the memory out.
LAUNCHES.tsv (tests/fakegpu/cupy_launches.py: node id, outcome, launches)
names such tests: a test that launched a kernel in either run is counted
apart and not judged."""
import sys
import xml.etree.ElementTree as ET


def outcomes(path):
    """{test id: ("pass" | "fail" | "skip", message)}"""
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        tid = "%s::%s" % (case.get("classname"), case.get("name"))
        kind, msg = "pass", ""
        for child in case:
            if child.tag in ("failure", "error"):
                kind, msg = "fail", (child.get("message") or "") + "\n" + (child.text or "")
            elif child.tag == "skipped" and kind != "fail":
                kind, msg = "skip", child.get("message") or ""
        out[tid] = (kind, msg)
    return out


def launched(paths):
    """The junit ids of the tests that launched a kernel (or whose count is
    unknown, -1) in any of the cupy_launches.py result files."""
    out = set()
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) < 3 or int(parts[2]) == 0:
                    continue
                node = parts[0].split("::")
                mod = node[0][:-3].replace("/", ".") if node[0].endswith(".py") else node[0]
                if len(node) == 3:
                    out.add("%s.%s::%s" % (mod, node[1], node[2]))
                elif len(node) == 2:
                    out.add("%s::%s" % (mod, node[1]))
    return out


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    ref, got = outcomes(sys.argv[1]), outcomes(sys.argv[2])
    skip = launched(sys.argv[3:]) & set(ref)
    if skip:
        print("%d tests launched a kernel on the fake: not judged" % len(skip))
        ref = {t: v for t, v in ref.items() if t not in skip}
        got = {t: v for t, v in got.items() if t not in skip}
    ref_pass = {t for t, (k, _) in ref.items() if k == "pass"}
    got_pass = {t for t, (k, _) in got.items() if k == "pass"}
    lost = sorted(ref_pass - got_pass)
    print("%d tests; %d pass with the framework's own allocator, %d with ebb's "
          "(%d lost, %d more)" % (len(ref), len(ref_pass), len(got_pass), len(lost),
                                  len(got_pass - ref_pass)))
    bad = []
    if set(ref) != set(got):
        bad.append("the runs ran different tests: %d only in the first, %d only in the second"
                   % (len(set(ref) - set(got)), len(set(got) - set(ref))))
    if not ref_pass:
        bad.append("no test passed with the framework's own allocator: the run itself is broken")
    for t in lost:
        kind, msg = got.get(t, ("not run", ""))
        bad.append("passes with the framework's own allocator, %s with ebb's: %s\n%s"
                   % (kind, t, msg[-2000:]))
    for b in bad:
        print("FAIL: " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
