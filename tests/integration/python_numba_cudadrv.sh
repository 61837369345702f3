#!/usr/bin/env bash
# The Numba plug-in proven by Numba's own tests: numba.cuda.tests.cudadrv
# (Debian's python3-numba) runs twice on the same fake GPU, once with Numba's
# own memory manager and once with NUMBA_CUDA_MEMORY_MANAGER=ebb.numba. Every
# test that passes with Numba's manager must pass with ebb's
# (tests/python/numba_pass_sets.py compares the two pass sets; no count is
# fixed). Then a sub-allocated array's device_memory_size() is its own size,
# not the 2 MiB segment ebb carved it from.
set -euo pipefail
: "${EBB_LIBCUDA:?}" "${FAKEGPU_STATE:?}" "${EBB_TEST_TMP:?}" "${EBB_SOURCE_DIR:?}" "${EBB_BUILD_DIR:?}"
. "$(dirname "$0")/../lib/lock.sh"
fail() { echo "FAIL: $*" >&2; exit 1; }
. "$(dirname "$0")/../lib/numba.sh"

numba_cudadrv_modules
# One process per run, every module in it, as Numba's own runner does. A
# hang is cut off; its log then has no "Ran" line, which fails the check.
echo "running ${#modules[@]} modules of numba.cuda.tests.cudadrv with Numba's own memory manager"
timeout 280 env "${PYENV[@]}" "$PY" -m unittest -v "${modules[@]}" >logs/numba.log 2>&1 || true
echo "running them again with NUMBA_CUDA_MEMORY_MANAGER=ebb.numba"
timeout 280 env "${PYENV[@]}" NUMBA_CUDA_MEMORY_MANAGER=ebb.numba EBB_LIB="$EBB_BUILD_DIR/libebb.so" \
  PYTHONPATH="$EBB_SOURCE_DIR/python" "$PY" -m unittest -v "${modules[@]}" >logs/ebb.log 2>&1 || true
"$PY" "$EBB_SOURCE_DIR/tests/python/numba_pass_sets.py" logs/numba.log logs/ebb.log "$NUMBA_TESTS_DIR" ||
  fail "ebb.numba loses tests that pass with Numba's own manager (logs: $EBB_TEST_TMP/logs)"

# device_memory_size() of arrays ebb sub-allocated from one segment
env "${PYENV[@]}" NUMBA_CUDA_MEMORY_MANAGER=ebb.numba EBB_LIB="$EBB_BUILD_DIR/libebb.so" \
  PYTHONPATH="$EBB_SOURCE_DIR/python" "$PY" - <<'PY' || fail "device_memory_size of a sub-allocated array"
import ctypes
import ebb
import numpy as np
from numba import cuda
from numba.cuda.cudadrv import driver

with ebb.owner("sizes"):
    a = cuda.to_device(np.full(10, 123, dtype=np.uint32))    # 40 bytes
    b = cuda.to_device(np.full(10, 7, dtype=np.uint32))      # its neighbour in the segment
    c = cuda.device_array(3000, dtype=np.float64)             # 24000 bytes
base, end = driver.device_extents(a)
print("a: device_memory_size %d bytes; the driver's allocation (cuMemGetAddressRange) %d bytes"
      % (driver.device_memory_size(a), end - base))
assert end - base >= 2 << 20, "a is not sub-allocated from a segment: %d" % (end - base)
assert driver.device_memory_size(a) == 40, driver.device_memory_size(a)
assert driver.device_memory_size(c) == 24000, driver.device_memory_size(c)
assert driver.device_memory_size(a.gpu_data) == 40
# a slice: the allocation it lives in, as Numba answers for its own memory
assert driver.device_memory_size(a[2:5]) == 40, driver.device_memory_size(a[2:5])
# the memset Numba's test_host_alloc_pinned does stays inside a
driver.device_memset(a, 0, driver.device_memory_size(a))
assert (a.copy_to_host() == 0).all() and (b.copy_to_host() == 7).all(), b.copy_to_host()
print("device_memory_size: ok")
PY
echo ok
