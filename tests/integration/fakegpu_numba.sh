#!/usr/bin/env bash
# Numba's own driver-level tests (numba.cuda.tests.cudadrv, Debian's
# python3-numba 0.56, which reaches libcuda.so.1 through ctypes only) run
# against the fake driver: `python3 -m unittest` with every module. Fails when a
# test fails that needs no PTX kernel, when an expected failure fails for
# another reason than the listed one, or when fewer pass than the floor.
# The expected failures: tests/fakegpu/numba_expected_failures.txt.
set -euo pipefail
: "${EBB_LIBCUDA:?}" "${FAKEGPU_STATE:?}" "${EBB_TEST_TMP:?}" "${EBB_SOURCE_DIR:?}"
. "$(dirname "$0")/../lib/lock.sh"
FLOOR=168 # passed on 2026-12-01: 217 ran, 8 skipped, 41 expected failures (need PTX)
fail() { echo "FAIL: $*" >&2; exit 1; }
. "$(dirname "$0")/../lib/numba.sh"

numba_cudadrv_modules
echo "running ${#modules[@]} modules of numba.cuda.tests.cudadrv"
# Every module in one process, as Numba's own runner does: the driver's
# state must survive one module's context resets into the next, and one
# interpreter start instead of 27 keeps the test fast. A hang is cut off; its
# log then has no "Ran" line, which fails the check.
timeout 600 env "${PYENV[@]}" "$PY" -m unittest -v "${modules[@]}" >logs/cudadrv.log 2>&1 || true
"$PY" "$EBB_SOURCE_DIR/tests/fakegpu/numba_cudadrv_check.py" logs \
  "$EBB_SOURCE_DIR/tests/fakegpu/numba_expected_failures.txt" "$FLOOR"
# Every process is gone: the device is empty again.
used=$("$FAKEGPU_SMI" --query-gpu=memory.used --format=csv,noheader,nounits | tr '\n' ' ')
[ "$used" = "0 0 " ] || fail "after the tests the fake devices still show $used MiB used"
echo ok
