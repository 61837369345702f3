"""Reads the output of `python3 -m unittest -v numba.cuda.tests.cudadrv.<m>...`
(every *.log in LOGDIR, one or more modules each) and judges it against the expected
failures (numba_expected_failures.txt) and a floor of passing tests.

  numba_cudadrv_check.py LOGDIR EXPECTED FLOOR

Exit 0 when: every failing test is listed as expected and its traceback shows
the listed reason, and at least FLOOR tests passed. Prints one line per
expected failure (XFAIL, with the reason) and a summary."""
import os
import re
import sys

REASONS = {
    "nvvm": ("compiles a kernel to PTX with NVVM (no libNVVM; a PTX kernel "
             "cannot run on the fake)", re.compile(r"[Nn]vvm|NVVM")),
    "ptx": ("loads a PTX kernel that has no host twin: the fake answers 218 "
            "CUDA_ERROR_INVALID_PTX", re.compile(r"\[218\]")),
}

MODULE = re.compile(r"\(numba\.cuda\.tests\.cudadrv\.(\w+)\.")
HEADER = re.compile(r"^(ERROR|FAIL): (\S+) \((\S+)\)")
RAN = re.compile(r"^Ran (\d+) tests? in")
COUNTS = re.compile(r"(failures|errors|skipped|expected failures|unexpected successes)=(\d+)")


def parse_log(text):
    """Returns (ran, skipped, {test id: traceback text}) of one module."""
    ran = skipped = 0
    failed = {}
    lines = text.splitlines()
    current = None
    for line in lines:
        m = HEADER.match(line)
        if m:
            current = m.group(3)
            failed.setdefault(current, "")
            continue
        if line.startswith("=" * 20) or RAN.match(line):
            current = None
        if current is not None:
            failed[current] += line + "\n"
        m = RAN.match(line)
        if m:
            ran = int(m.group(1))
        if line.startswith(("OK", "FAILED")):
            for key, n in COUNTS.findall(line):
                if key == "skipped":
                    skipped = int(n)
    return ran, skipped, failed


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    logdir, expected_path, floor = sys.argv[1], sys.argv[2], int(sys.argv[3])
    expected = {}
    with open(expected_path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            kind, _, test = line.partition(" ")
            if kind not in REASONS or not test:
                print(f"{expected_path}:{n}: bad line '{line}' (want: nvvm|ptx TEST_ID)")
                return 2
            expected[test.strip()] = kind

    ran = skipped = 0
    failed = {}
    logs = sorted(f for f in os.listdir(logdir) if f.endswith(".log"))
    modules = set()
    for name in logs:
        with open(os.path.join(logdir, name), errors="replace") as f:
            text = f.read()
        r, s, fl = parse_log(text)
        if r == 0 and "Ran 0 tests" not in text:
            print(f"FAIL: {name} shows no 'Ran N tests' line (a crash or a hang?); its end:")
            print(text[-3000:])
            return 1
        modules.update(MODULE.findall(text))
        ran += r
        skipped += s
        failed.update(fl)

    bad = []
    for test, tb in sorted(failed.items()):
        kind = expected.get(test)
        if kind is None:
            bad.append(f"UNEXPECTED FAILURE {test}\n{tb}")
        elif not REASONS[kind][1].search(tb):
            bad.append(f"FAILED FOR ANOTHER REASON than '{kind}': {test}\n{tb}")
        else:
            print(f"XFAIL {test}: {REASONS[kind][0]}")
    now_pass = sorted(t for t in expected if t not in failed)
    for t in now_pass:
        print(f"note: expected failure did not fail (passed or skipped): {t}")

    passed = ran - skipped - len(failed)
    eligible = ran - skipped - sum(1 for t in failed if t in expected)
    share = 100.0 * passed / eligible if eligible else 0.0
    print(f"numba cudadrv on the fake: {len(modules)} modules, {ran} tests ran, "
          f"{passed} passed, {skipped} skipped, {len(failed)} failed "
          f"({len(failed) - len(bad)} expected: need a PTX kernel); "
          f"{passed}/{eligible} = {share:.1f}% of the tests that need no PTX kernel "
          f"pass; floor {floor}")
    for b in bad:
        print(b)
    if bad:
        print(f"FAIL: {len(bad)} test(s) failed that the fake should pass")
        return 1
    if passed < floor:
        print(f"FAIL: {passed} tests passed, fewer than the recorded floor {floor}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
