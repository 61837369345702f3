#!/usr/bin/env bash
# A CPU-only `ebb` makes no driver call: with EBB_LIBCUDA and EBB_LIBNVML set
# to abortcuda (every entry point aborts; loading it writes ABORTCUDA_MARK),
# `ebb devices --device cpu` and `ebb version --short` work and never load it.
# The plain `ebb devices` probes the driver and must die of SIGABRT, which
# shows the trap is live.
set -u
. "$(dirname "$0")/../lib/lock.sh"
fail=0
check() { local what=$1; shift; if ! "$@"; then echo "FAIL: $what"; fail=1; else echo "ok   $what"; fi; }
mkdir -p "$EBB_TEST_TMP"
trap_lib=$EBB_BUILD_DIR/tests/support/libabortcuda.so
[ -f "$trap_lib" ] || { echo "FAIL: $trap_lib was not built"; exit 1; }
export EBB_LIBCUDA=$trap_lib EBB_LIBNVML=$trap_lib ABORTCUDA_MARK=$EBB_TEST_TMP/mark
ulimit -c 0
rm -f "$ABORTCUDA_MARK"

out=$("$EBB" devices --device cpu 2>&1); rc=$?
echo "$out"
check "devices --device cpu exits 0" test $rc -eq 0
check "devices --device cpu lists the CPU" grep -q '^cpu' <<<"$out"
check "devices --device cpu never loaded the driver" test ! -e "$ABORTCUDA_MARK"
out=$("$EBB" devices --device cpu --json 2>&1); rc=$?
check "devices --device cpu --json exits 0" test $rc -eq 0
out=$("$EBB" version --short 2>&1); rc=$?
check "version --short exits 0" test $rc -eq 0
check "version --short loads nothing" test ! -e "$ABORTCUDA_MARK"
"$EBB" devices --help >/dev/null; rc=$?
check "devices --help exits 0" test $rc -eq 0
check "devices --help loads nothing" test ! -e "$ABORTCUDA_MARK"

# A whole CPU pipeline run (the synthetic stages) calls nothing in the driver.
if "$EBB" run --help >/dev/null 2>&1; then
  echo "any input" >"$EBB_TEST_TMP/input.txt"
  out=$("$EBB" run --pipeline synthetic --device cpu "$EBB_TEST_TMP/input.txt" -o "$EBB_TEST_TMP/out" 2>&1); rc=$?
  echo "$out"
  check "run --pipeline synthetic --device cpu exits 0 under the trap" test $rc -eq 0
  check "run --device cpu never loaded the driver" test ! -e "$ABORTCUDA_MARK"
else
  echo "note: this ebb has no 'run' command yet; the pipeline run under the trap is not checked"
fi

"$EBB" devices >/dev/null 2>&1; rc=$?
check "plain devices (probe) hits the trap: SIGABRT (rc 134)" test $rc -eq 134
check "plain devices loaded the trap library" test -e "$ABORTCUDA_MARK"
exit $fail
