# Sourced by the Numba-on-the-fake tests, after their fail() (they run under
# `set -euo pipefail` and fail() exits): PY, Debian's /usr/bin/python3 (its
# python3-numba, not a pyenv python's), checked to import numba.cuda; PYENV,
# what Python needs in its environment to load a fake built with sanitizers
# (`make asan`); NUMBA_CUDA_DRIVER pointed at the fake.
: "${EBB_LIBCUDA:?}"
PY=/usr/bin/python3
[ -x "$PY" ] || fail "$PY not found: run scripts/install-deps.sh"
"$PY" -c 'import numba.cuda' 2>/dev/null ||
  fail "python3-numba is not installed for $PY: run scripts/install-deps.sh (it installs python3-numba)"
# Python, which is not built with the sanitizers, must load their runtimes
# first (and not report its own leaks).
PYENV=()
san=$(ldd "$EBB_LIBCUDA" 2>/dev/null | awk '/lib(asan|ubsan)\.so/ { printf "%s%s", sep, $3; sep = ":" }')
if [ -n "$san" ]; then
  PYENV=(LD_PRELOAD="$san" ASAN_OPTIONS="detect_leaks=0:${ASAN_OPTIONS:-}")
fi
export NUMBA_CUDA_DRIVER="$EBB_LIBCUDA"

# numba_cudadrv_modules: a clean $EBB_TEST_TMP (logs/ and Numba's cache in
# it) and a fresh fake state, two small devices (Numba's managed-memory test
# fills half of one; with two its multi-GPU tests run), no
# CUDA_VISIBLE_DEVICES or memory manager from outside; sets `modules` to
# every module of numba.cuda.tests.cudadrv, and cds into $EBB_TEST_TMP.
numba_cudadrv_modules() {
  : "${FAKEGPU_STATE:?}" "${EBB_TEST_TMP:?}"
  rm -rf "$EBB_TEST_TMP" "$FAKEGPU_STATE"
  mkdir -p "$EBB_TEST_TMP/logs"
  export NUMBA_CACHE_DIR="$EBB_TEST_TMP/cache" PYTHONDONTWRITEBYTECODE=1
  export FAKEGPU_MEMORY_MIB=1024 FAKEGPU_DEVICES=2
  unset CUDA_VISIBLE_DEVICES NUMBA_CUDA_MEMORY_MANAGER
  NUMBA_TESTS_DIR=$(env "${PYENV[@]}" "$PY" -c \
    'import os, numba.cuda.tests.cudadrv as m; print(os.path.dirname(m.__file__))')
  modules=()
  local f
  for f in "$NUMBA_TESTS_DIR"/test_*.py; do
    modules+=("numba.cuda.tests.cudadrv.$(basename "$f" .py)")
  done
  [ "${#modules[@]}" -gt 0 ] || fail "no test modules in $NUMBA_TESTS_DIR"
  cd "$EBB_TEST_TMP"
}
