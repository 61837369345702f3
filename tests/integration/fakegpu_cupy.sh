#!/usr/bin/env bash
# CuPy's own tests/cupy_tests/cuda_tests (cupy 14.2.0, from the sdist that
# scripts/install-deps.sh unpacks under /opt/ebb-tools/cupy-src) run with the
# cupy-cuda13x wheel (its CUDA runtime linked in statically) on the fake driver,
# two fake devices. A pytest plugin (tests/fakegpu/cupy_launches.py) records for
# every test whether the fake counted a kernel launch (fakegpu-smi
# kernel_launches); tests/fakegpu/cupy_check.py judges the tests that launched
# none: each failure must be listed with its reason in
# tests/fakegpu/cupy_expected_failures.txt, and at least FLOOR must pass.
# Nothing is downloaded here: without the venv or the sdist this test fails
# saying so.
set -euo pipefail
: "${FAKEGPU_SMI:?}" "${FAKEGPU_STATE:?}" "${EBB_TEST_TMP:?}" "${EBB_SOURCE_DIR:?}"
. "$(dirname "$0")/../lib/fakegpu.sh"
# Measured on 2026-12-06: 516 of the 516 tests without a kernel launch that
# ran passed (100 %; 514 on 2026-12-03, before the fake's pools
# sub-allocated; issue 32 asks for 90 %); the floor leaves 12 for a per-test
# timeout on a loaded machine.
FLOOR=504
VENV=${EBB_CUPY_VENV:-/opt/ebb-tools/cupy}
SRC=${EBB_CUPY_SRC:-/opt/ebb-tools/cupy-src/cupy-14.2.0}
[ -x "$VENV/bin/python" ] || { fail "no CuPy venv at $VENV: run scripts/install-deps.sh"; exit 1; }
[ -d "$SRC/tests/cupy_tests/cuda_tests" ] ||
  { fail "no CuPy tests at $SRC: run scripts/install-deps.sh"; exit 1; }
fakedir=$(dirname "$FAKEGPU_SMI")
export LD_LIBRARY_PATH="$fakedir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export FAKEGPU_DEVICES=2 FAKEGPU_MEMORY_MIB=8192
export FAKEGPU_CUPY_RESULTS="$T/results.tsv" CUPY_CACHE_DIR="$T/kernel-cache"
export PYTHONPATH="$EBB_SOURCE_DIR/tests/fakegpu" PYTHONDONTWRITEBYTECODE=1
unset CUDA_VISIBLE_DEVICES
cd "$SRC"
# Each test is cut off after 60 s, the whole run after 10 minutes.
# Not run: NCCL's 4-process split (its worker processes wait forever for
# collectives, which need kernels; the interpreter then hangs at exit joining
# them until the 10 minutes are up).
env "${FOREIGN_ENV[@]}" timeout 600 "$VENV/bin/python" -m pytest -p cupy_launches -p no:cacheprovider \
  --timeout 60 -q -rN tests/cupy_tests/cuda_tests \
  --deselect 'tests/cupy_tests/cuda_tests/test_nccl.py::TestCommSplit::test_4_processes_2_subcomm' \
  >"$T/pytest.log" 2>&1 || true
tail -n 3 "$T/pytest.log"
"$VENV/bin/python" "$EBB_SOURCE_DIR/tests/fakegpu/cupy_check.py" "$T/results.tsv" \
  "$EBB_SOURCE_DIR/tests/fakegpu/cupy_expected_failures.txt" "$FLOOR"
used=$("$FAKEGPU_SMI" --query-gpu=memory.used --format=csv,noheader,nounits | tr '\n' ' ')
[ "$used" = "0 0 " ] || fail "after the tests the fake devices still show $used MiB used"
echo ok
exit $((fails > 0))
