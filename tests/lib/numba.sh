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
