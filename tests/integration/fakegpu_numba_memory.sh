#!/usr/bin/env bash
# A Numba program (tests/fakegpu/numba_memory_steps.py) allocates device
# arrays, pinned and managed memory, copies, frees, resets its context and
# closes it; after every step fakegpu-smi, a separate process, must show the
# program's exact usage (its context included). After it exits, and after a
# second run is killed with SIGKILL while holding memory, the device is empty.
set -euo pipefail
: "${EBB_LIBCUDA:?}" "${FAKEGPU_SMI:?}" "${FAKEGPU_STATE:?}" "${EBB_TEST_TMP:?}" "${EBB_SOURCE_DIR:?}"
. "$(dirname "$0")/../lib/lock.sh"
fail() { echo "FAIL: $*" >&2; exit 1; }
. "$(dirname "$0")/../lib/numba.sh"
rm -rf "$EBB_TEST_TMP" "$FAKEGPU_STATE"
mkdir -p "$EBB_TEST_TMP"
export NUMBA_CACHE_DIR="$EBB_TEST_TMP/cache"
export FAKEGPU_MEMORY_MIB=4096 FAKEGPU_CONTEXT_MIB=300 FAKEGPU_GRANULARITY_KIB=2048 FAKEGPU_DEVICES=1
unset CUDA_VISIBLE_DEVICES FAKEGPU_FAIL_DEVICE FAKEGPU_FAIL_ALLOC_AT
SCRIPT="$EBB_SOURCE_DIR/tests/fakegpu/numba_memory_steps.py"

usage_of() { # MiB fakegpu-smi shows for pid $1 ("" when not listed)
  "$FAKEGPU_SMI" --query-compute-apps=pid,used_memory --format=csv,noheader,nounits |
    awk -F', ' -v p="$1" '$1 == p { print $2 }'
}
device_used() { "$FAKEGPU_SMI" --query-gpu=memory.used --format=csv,noheader,nounits; }

start() {
  coproc P { exec env "${PYENV[@]}" "$PY" "$SCRIPT" "$@" 2>"$EBB_TEST_TMP/stderr"; }
  ppid_=$P_PID
}
expect_step() { # read the next step line; it must be $1
  local line
  read -r -t 60 line <&"${P[0]}" || { cat "$EBB_TEST_TMP/stderr" >&2; fail "no answer from the Numba program (wanted step $1)"; }
  [ "$line" = "step $1" ] || { cat "$EBB_TEST_TMP/stderr" >&2; fail "wanted 'step $1', got '$line'"; }
}
check() { # step, expected MiB for the process ("" = not listed)
  expect_step "$1"
  local got
  got=$(usage_of "$ppid_")
  echo "step $1: fakegpu-smi shows '${got}' MiB for pid $ppid_ (want '${2}')"
  [ "$got" = "$2" ] || fail "after step $1 fakegpu-smi shows '$got' MiB for the Numba process, want '$2'"
  [ "$(device_used)" = "${2:-0}" ] || fail "after step $1 the device shows $(device_used) MiB used, want ${2:-0}"
  echo next >&"${P[1]}"
}

start
trap 'kill -9 "$ppid_" 2>/dev/null || true' EXIT
check context 300
check to_device_64 364
check device_array_100 464
check pinned_8_managed_32 496
check copies 560
check freed 332
check reset 300
check closed ""
check again_64 364
wait "$ppid_" || fail "the Numba program failed: $(cat "$EBB_TEST_TMP/stderr")"
[ "$(device_used)" = 0 ] || fail "after the program exited the device shows $(device_used) MiB used"
[ -z "$(usage_of "$ppid_")" ] || fail "the exited program is still listed"
echo "exited: device empty"

start hold
check context 300
expect_step to_device_64
[ "$(usage_of "$ppid_")" = 364 ] || fail "the second run holds '$(usage_of "$ppid_")' MiB, want 364"
kill -9 "$ppid_"
wait "$ppid_" 2>/dev/null || true
[ "$(device_used)" = 0 ] || fail "after SIGKILL the device shows $(device_used) MiB used"
[ -z "$(usage_of "$ppid_")" ] || fail "the killed program is still listed"
echo "killed: device empty"
echo ok
