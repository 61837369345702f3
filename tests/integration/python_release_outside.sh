#!/usr/bin/env bash
# ebb.release() and o.release() count what release hooks free outside ebb's
# allocator (a framework's own cache), so the figure ebb prints is the drop
# fakegpu-smi sees (tests/python/release_outside_check.py).
set -u
: "${EBB_BUILD_DIR:?}" "${EBB_SOURCE_DIR:?}" "${FAKEGPU_SMI:?}" "${EBB_LIBCUDA:?}"
. "$(dirname "$0")/../lib/common.sh"
export EBB_LIB=$EBB_BUILD_DIR/libebb.so PYTHONDONTWRITEBYTECODE=1
export FAKEGPU_MEMORY_MIB=4096 FAKEGPU_CONTEXT_MIB=300
rm -f "$FAKEGPU_STATE"
# an ASan build's library needs its runtime loaded first into Python
if grep -q '^EBB_SANITIZE:BOOL=ON' "$EBB_BUILD_DIR/CMakeCache.txt" 2>/dev/null; then
  export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
  export ASAN_OPTIONS=detect_leaks=0
fi
PYTHONPATH=$EBB_SOURCE_DIR/python:$EBB_SOURCE_DIR/tests/python python3 \
  "$EBB_SOURCE_DIR/tests/python/release_outside_check.py" || fail "release_outside_check.py"
[ $fails -eq 0 ] && echo "python_release_outside: ok"
exit $((fails > 0))
