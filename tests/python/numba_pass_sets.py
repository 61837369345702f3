"""Compares two runs of `python3 -m unittest -v numba.cuda.tests.cudadrv...`
on the same fake GPU: one with Numba's own memory manager (REFERENCE), one
with NUMBA_CUDA_MEMORY_MANAGER=ebb.numba (CANDIDATE).

  numba_pass_sets.py REFERENCE.log CANDIDATE.log TESTDIR

Exit 0 when every test that passed in the reference run also passed in the
candidate run, and both ran the same tests. The one exception is Numba's
own: a test Numba skips whenever any external memory manager is in use
(@skip_if_external_memmgr("reason") in TESTDIR's sources, e.g. tests of
Numba's own deallocation queue) is reported as not applicable. Otherwise it names each test the
plug-in lost, with its traceback from the candidate log. The figures are the
two runs' own: no count is fixed here."""
import os
import re
import sys

START = re.compile(r"^(\w+) \(([\w.]+)\)")
RESULT = re.compile(r"(?:^| \.\.\. )(ok|FAIL|ERROR|skipped.*|expected failure|unexpected success)$")
HEADER = re.compile(r"^(ERROR|FAIL): (\S+) \(([\w.]+)\)")
RAN = re.compile(r"^Ran (\d+) tests? in")


EMM_SKIP = re.compile(r"""@skip_if_external_memmgr\(\s*(['"])(.*?)\1\s*\)""")


def emm_skip_reasons(testdir):
    """The reasons Numba gives for skipping a test under any EMM plug-in."""
    reasons = set()
    for name in os.listdir(testdir):
        if name.startswith("test_") and name.endswith(".py"):
            with open(os.path.join(testdir, name), errors="replace") as f:
                reasons.update(m.group(2) for m in EMM_SKIP.finditer(f.read()))
    return reasons


def outcomes(path):
    """{test id: "pass" | "fail" | "skip" | "xfail"}, tracebacks, tests ran,
    {test id: skip reason}."""
    with open(path, errors="replace") as f:
        lines = f.read().splitlines()
    out, tracebacks, ran, why = {}, {}, None, {}
    cur, tb_of = None, None
    for line in lines:
        m = HEADER.match(line)
        if m:
            tb_of = m.group(3)
            out[tb_of] = "fail"
            tracebacks[tb_of] = ""
            continue
        if tb_of is not None:
            if line.startswith("=" * 20) or RAN.match(line):
                tb_of = None
            else:
                tracebacks[tb_of] += line + "\n"
                continue
        m = RAN.match(line)
        if m:
            ran = int(m.group(1))
            continue
        m = START.match(line)
        if m and m.group(2).endswith("." + m.group(1)):
            cur = m.group(2)
            out.setdefault(cur, None)
        r = RESULT.search(line)
        if r and cur is not None:
            word = r.group(1)
            if out.get(cur) != "fail":
                out[cur] = ("pass" if word in ("ok", "unexpected success") else
                            "skip" if word.startswith("skipped") else
                            "xfail" if word == "expected failure" else "fail")
                if word.startswith("skipped"):
                    why[cur] = word[len("skipped"):].strip().strip("'\"")
            cur = None
    # a test whose result line was lost in its own output, and that has no
    # FAIL/ERROR block, passed
    for t, o in out.items():
        if o is None:
            out[t] = "pass"
    return out, tracebacks, ran, why


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    ref, ref_tb, ref_ran, _ = outcomes(sys.argv[1])
    got, got_tb, got_ran, got_why = outcomes(sys.argv[2])
    not_for_emm = emm_skip_reasons(sys.argv[3])
    bad = []
    for name, ran in ((sys.argv[1], ref_ran), (sys.argv[2], got_ran)):
        if ran is None:
            bad.append("%s has no 'Ran N tests' line (a crash or a hang?)" % name)
    if set(ref) != set(got):
        bad.append("the runs ran different tests: only with Numba's manager %s; only with ebb.numba %s"
                   % (sorted(set(ref) - set(got)), sorted(set(got) - set(ref))))
    ref_pass = {t for t, o in ref.items() if o == "pass"}
    got_pass = {t for t, o in got.items() if o == "pass"}
    na = sorted(t for t in ref_pass - got_pass
                if got.get(t) == "skip" and got_why.get(t) in not_for_emm)
    lost = sorted(ref_pass - got_pass - set(na))
    gained = sorted(got_pass - ref_pass)
    print("numba cudadrv on the fake: %d tests; %d pass with Numba's own memory manager, "
          "%d with ebb.numba (%d not applicable to an external memory manager, "
          "%d of Numba's passes lost, %d more)"
          % (len(ref), len(ref_pass), len(got_pass), len(na), len(lost), len(gained)))
    for t in na:
        print("not applicable (Numba skips it under any EMM plug-in: %s): %s" % (got_why[t], t))
    for t in gained:
        print("passes only with ebb.numba: %s" % t)
    for t in lost:
        bad.append("passes with Numba's own manager, %s with ebb.numba: %s\n%s"
                   % (got.get(t, "not run"), t, got_tb.get(t, "")))
    if not ref_pass:
        bad.append("no test passed with Numba's own manager: the run itself is broken")
    for b in bad:
        print("FAIL: " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
