#!/usr/bin/env bash
# The runtime-API probe (tests/fakegpu/cudart_probe.cu), built with nvcc and
# linked with static and with shared libcudart, runs on the fake (two devices
# of 8 GiB): every runtime call it makes must answer what the documentation
# gives, good calls and mistakes alike, and it must make at least MIN
# distinct runtime calls (issue 41 asks for 110; measured 146 on 2026-12-07).
# The device must be empty after each run. Built only where nvcc exists;
# without it this test is reported skipped (77), never passed.
set -euo pipefail
: "${FAKEGPU_SMI:?}" "${FAKEGPU_STATE:?}" "${EBB_TEST_TMP:?}"
. "$(dirname "$0")/../lib/fakegpu.sh"
MIN=110
fakedir=$(dirname "$FAKEGPU_SMI")
if [ ! -x "$fakedir/cudart-probe-static" ]; then
  echo "SKIPPED: no $fakedir/cudart-probe-static (built only when nvcc is found)" >&2
  exit 77
fi
export LD_LIBRARY_PATH="$fakedir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export FAKEGPU_DEVICES=2 FAKEGPU_MEMORY_MIB=8192
unset CUDA_VISIBLE_DEVICES
for kind in static shared; do
  log="$EBB_TEST_TMP/probe-$kind.log"
  rm -f "$FAKEGPU_STATE"
  rc=0
  env "${FOREIGN_ENV[@]}" timeout 120 "$fakedir/cudart-probe-$kind" >"$log" 2>&1 || rc=$?
  if [ "$rc" != 0 ]; then
    fail "cudart-probe-$kind exited $rc: $(grep -m1 FAIL "$log" || tail -n 3 "$log")"
    continue
  fi
  n=$(sed -n 's/^probe: \([0-9]*\) distinct runtime calls.*/\1/p' "$log")
  echo "$kind: $(grep '^probe:' "$log")"
  [ -n "$n" ] && [ "$n" -ge "$MIN" ] ||
    fail "cudart-probe-$kind made ${n:-no} distinct runtime calls, fewer than $MIN"
  used=$("$FAKEGPU_SMI" --query-gpu=memory.used --format=csv,noheader,nounits | tr '\n' ' ')
  [ "$used" = "0 0 " ] || fail "after cudart-probe-$kind the devices show $used MiB used"
done
[ "$fails" = 0 ] && echo ok
exit $((fails > 0))
