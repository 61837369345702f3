#!/usr/bin/env bash
# Numba's own driver-level tests (numba.cuda.tests.cudadrv, Debian's
# python3-numba 0.56, which reaches libcuda.so.1 through ctypes only) run
# against the fake driver, one `python3 -m unittest` per module. Fails when a
# test fails that needs no PTX kernel, when an expected failure fails for
# another reason than the listed one, or when fewer pass than the floor.
# The expected failures: tests/fakegpu/numba_expected_failures.txt.
set -euo pipefail
: "${EBB_LIBCUDA:?}" "${FAKEGPU_STATE:?}" "${EBB_TEST_TMP:?}" "${EBB_SOURCE_DIR:?}"
FLOOR=165 # passed on 2026-12-01: 217 ran, 11 skipped, 41 expected failures (need PTX)
PY=/usr/bin/python3 # Debian's python3-numba belongs to it, not to a pyenv python
fail() { echo "FAIL: $*" >&2; exit 1; }

[ -x "$PY" ] || fail "$PY not found: run scripts/install-deps.sh"
if ! "$PY" -c 'import numba.cuda' 2>/dev/null; then
  fail "python3-numba is not installed for $PY: run scripts/install-deps.sh (it installs python3-numba)"
fi
rm -rf "$EBB_TEST_TMP" "$FAKEGPU_STATE"
mkdir -p "$EBB_TEST_TMP/logs"
export NUMBA_CUDA_DRIVER="$EBB_LIBCUDA"
export NUMBA_CACHE_DIR="$EBB_TEST_TMP/cache"
# Numba's managed-memory test fills half the device: keep the device small.
export FAKEGPU_MEMORY_MIB=1024 FAKEGPU_DEVICES=1
dir=$("$PY" -c 'import os, numba.cuda.tests.cudadrv as m; print(os.path.dirname(m.__file__))')
cd "$EBB_TEST_TMP"
n=0
for f in "$dir"/test_*.py; do
  m=$(basename "$f" .py)
  n=$((n + 1))
  # A module that hangs is cut off; its log then has no "Ran" line: a failure.
  timeout 300 "$PY" -m unittest -v "numba.cuda.tests.cudadrv.$m" >"logs/$m.log" 2>&1 || true
done
[ "$n" -gt 0 ] || fail "no test modules in $dir"
"$PY" "$EBB_SOURCE_DIR/tests/fakegpu/numba_cudadrv_check.py" logs \
  "$EBB_SOURCE_DIR/tests/fakegpu/numba_expected_failures.txt" "$FLOOR"
# Every process is gone: the device is empty again.
used=$("$FAKEGPU_SMI" --query-gpu=memory.used --format=csv,noheader,nounits)
[ "$used" = 0 ] || fail "after the tests the fake device still shows $used MiB used"
echo ok
