#!/usr/bin/env bash
# A plain `cmake -S . -B DIR` (no CMAKE_BUILD_TYPE) configures an optimised
# build (RelWithDebInfo: -O2 -g), as `make build` does, and src/ compiles
# with the stricter warnings (-Wshadow -Wstrict-prototypes
# -Wmissing-prototypes -Wformat=2 -Wvla); a call to an undeclared function
# is always an error; -DEBB_WERROR=ON adds -Werror. An
# explicit CMAKE_BUILD_TYPE still wins. Configure only: nothing is built.
set -u
: "${EBB_SOURCE_DIR:?}"
. "$(dirname "$0")/../lib/common.sh"
command -v cmake > /dev/null || { echo "FAIL: cmake is not installed" >&2; exit 1; }

configure() { # DIR ARGS...: configures the source tree into DIR
  local dir=$1
  shift
  cmake -S "$EBB_SOURCE_DIR" -B "$dir" "$@" > "$dir.log" 2>&1 ||
    { cat "$dir.log"; fail "cmake -S . -B $dir $* failed"; return 1; }
}
# what a C file of the base room is compiled with
flags_of() { cat "$1/src/base/CMakeFiles/ebb_base.dir/flags.make"; }

if configure "$T/plain"; then
  grep -qx 'CMAKE_BUILD_TYPE:STRING=RelWithDebInfo' "$T/plain/CMakeCache.txt" ||
    fail "no default build type: $(grep '^CMAKE_BUILD_TYPE' "$T/plain/CMakeCache.txt")"
  f=$(flags_of "$T/plain")
  echo "$f" | grep -q -- '-O2' || fail "a plain configure does not optimise: $(echo "$f" | grep C_FLAGS)"
  for w in -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wformat=2 -Wvla; do
    echo "$f" | grep -q -- "$w\b" || fail "src/ is not compiled with $w"
  done
  echo "$f" | grep -q -- '-Werror=implicit-function-declaration' ||
    fail "a call to an undeclared function is not an error"
  echo "$f" | grep -q -- '-Werror\( \|$\)' && fail "-Werror without EBB_WERROR"
  # the stricter set is for src/ and include/ only: the fake GPU keeps the first
  grep -q -- '-Wshadow' "$T/plain/tests/fakegpu/CMakeFiles/fakecuda.dir/flags.make" &&
    fail "the fake GPU is compiled with the stricter warnings (src/ and include/ only)"
fi
# the same tree configured again (quick: the checks are cached) with a type
if configure "$T/plain" -DCMAKE_BUILD_TYPE=Debug -DEBB_WERROR=ON; then
  grep -qx 'CMAKE_BUILD_TYPE:STRING=Debug' "$T/plain/CMakeCache.txt" ||
    fail "an explicit CMAKE_BUILD_TYPE=Debug was overridden"
  f=$(flags_of "$T/plain")
  echo "$f" | grep -q -- '-O2' && fail "a Debug build optimises"
  echo "$f" | grep -q -- '-Werror\( \|$\)' || fail "EBB_WERROR=ON does not add -Werror"
fi

[ $fails -eq 0 ] && echo "build_defaults: ok"
exit $((fails > 0))
