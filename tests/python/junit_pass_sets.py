"""Compares two pytest runs of the same tests (--junitxml), one with the
framework's own allocator (REFERENCE) and one with ebb's plug-in
(CANDIDATE): exit 0 when every test that passed in the first passed in the
second, and both ran the same tests; otherwise names each test lost, with
its message from the candidate run. No count is fixed here.

  junit_pass_sets.py REFERENCE.xml CANDIDATE.xml"""
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


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    ref, got = outcomes(sys.argv[1]), outcomes(sys.argv[2])
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
