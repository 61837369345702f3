#!/usr/bin/env bash
# The Python package (python/ebb/, ctypes over libebb.so) on the fake GPU:
# owners, release figures against fakegpu-smi, leak sites, context release
# (tests/python/owners_check.py); and `pip install ./python` works offline.
set -u
: "${EBB_BUILD_DIR:?}" "${EBB_SOURCE_DIR:?}" "${FAKEGPU_SMI:?}"
. "$(dirname "$0")/../lib/common.sh"
export EBB_LIB=$EBB_BUILD_DIR/libebb.so
export PYTHONDONTWRITEBYTECODE=1  # nothing written into the source tree
# an ASan build's library needs its runtime loaded first into Python
if grep -q '^EBB_SANITIZE:BOOL=ON' "$EBB_BUILD_DIR/CMakeCache.txt" 2>/dev/null; then
  export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
  export ASAN_OPTIONS=detect_leaks=0
fi
PYTHONPATH=$EBB_SOURCE_DIR/python:$EBB_SOURCE_DIR/tests/python python3 \
  "$EBB_SOURCE_DIR/tests/python/owners_check.py" || fail "owners_check.py"
# installable as a plain package (no compile step, nothing downloaded); built
# from a copy, since building writes next to the sources
cp -r "$EBB_SOURCE_DIR/python" "$T/src"
python3 -m pip install -q --no-build-isolation --no-deps --no-index --target "$T/site" \
  "$T/src" > "$T/pip.log" 2>&1 || fail "pip install ./python: $(cat "$T/pip.log")"
(cd "$T" && PYTHONPATH=$T/site python3 -c 'import ebb, sys; sys.exit(0 if ebb.__file__.startswith(sys.argv[1]) and ebb.api_version() // 1000 == 1 else 1)' "$T/site") ||
  fail "the installed package does not import"
# installed, with no EBB_LIB: found next to the `ebb` on PATH
(cd "$T" && env -u EBB_LIB PATH="$EBB_BUILD_DIR:$PATH" PYTHONPATH=$T/site python3 -c 'import ebb, sys; ebb.device(); sys.exit(0 if ebb._lib.lib._name == sys.argv[1] else 1)' "$EBB_BUILD_DIR/libebb.so") ||
  fail "the installed package does not find libebb.so next to the ebb on PATH"
# without the library: a clear error naming what was tried
(cd "$T" && EBB_LIB=$T/nope.so PYTHONPATH=$T/site python3 -c 'import ebb; ebb.device()' > "$T/nolib" 2>&1) &&
  fail "ebb.device() without a library succeeded"
grep -q "cannot load libebb.so; tried: $T/nope.so" "$T/nolib" || fail "no-library message: $(tail -1 "$T/nolib")"
[ $fails -eq 0 ] && echo "python_owners: ok"
exit $((fails > 0))
