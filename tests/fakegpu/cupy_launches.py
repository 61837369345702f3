"""pytest plugin for tests/integration/fakegpu_cupy.sh: records, for every
test of CuPy's own suite run on the fake GPU, its outcome and whether the
fake counted a kernel launch while it ran (fakegpu-smi's kernel_launches for
this process, read before and after the test).

Writes one line per test to $FAKEGPU_CUPY_RESULTS:
    <nodeid>\t<passed|failed|skipped|error>\t<launches during the test>\t<why>
where why, for a test that failed, is its error's first line and what the
fake printed on stderr meanwhile (a fault, an unsupported call), so a failure
in a run whose log is gone (CI) still says what went wrong; empty otherwise.
"""
import os
import subprocess

import pytest

_SMI = os.environ.get("FAKEGPU_SMI", "fakegpu-smi")
_OUT = os.environ.get("FAKEGPU_CUPY_RESULTS", "cupy-results.tsv")


def _launches():
    """Kernel launches the fake counted for this process, all devices."""
    try:
        out = subprocess.run(
            [_SMI, "--query-compute-apps=pid,kernel_launches", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return -1
    total = 0
    for line in out.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 2 and fields[0] == str(os.getpid()):
            total += int(fields[1])
    return total


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    before = _launches()
    item._fakegpu_outcome = "passed"
    item._fakegpu_why = ""
    yield
    after = _launches()
    launched = after - before if before >= 0 and after >= 0 else -1
    with open(_OUT, "a", encoding="utf-8") as f:
        f.write(f"{item.nodeid}\t{item._fakegpu_outcome}\t{launched}\t{item._fakegpu_why}\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped:
        if item._fakegpu_outcome == "passed":
            item._fakegpu_outcome = "skipped"
    elif rep.failed:
        item._fakegpu_outcome = "failed" if rep.when == "call" else "error"
        if not item._fakegpu_why:
            item._fakegpu_why = _why(rep)


def _why(rep):
    """The error's first line and the fake's own lines, on one line."""
    crash = getattr(getattr(rep, "longrepr", None), "reprcrash", None)
    parts = [crash.message.splitlines()[0] if crash and crash.message else str(rep.longrepr)[:200]]
    parts += [line for line in (rep.capstderr or "").splitlines()
              if line.startswith("fakegpu:") and "has no host twin" not in line][:3]
    return " | ".join(p.replace("\t", " ")[:300] for p in parts)
