#!/usr/bin/env bash
# `make bench` runs every program in BUILD/bench/ (scripts/bench.sh), so
# every bench/<name>.c must be built there as BUILD/bench/<name>. A room's
# bench/<room>.cmake that names a source file claims it (bench/CMakeLists.txt
# then skips it): a comment naming bench/fakegpu_copy.c once did, and the
# fake's copy ratio (issue 41) was never built nor printed.
set -u
: "${EBB_SOURCE_DIR:?}" "${EBB_BUILD_DIR:?}"
. "$(dirname "$0")/../lib/common.sh"
n=0
for src in "$EBB_SOURCE_DIR"/bench/*.c; do
  name=$(basename "$src" .c)
  n=$((n + 1))
  [ -x "$EBB_BUILD_DIR/bench/$name" ] ||
    fail "bench/$name.c has no program $EBB_BUILD_DIR/bench/$name: make bench would not run it"
done
[ "$n" -gt 0 ] || fail "no bench/*.c found under $EBB_SOURCE_DIR/bench"
echo "$n bench programs from bench/*.c checked"
exit $((fails > 0))
