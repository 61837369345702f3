#!/usr/bin/env bash
# CUDA graphs built node by node through the runtime API
# (tests/fakegpu/cudart_graphs.cu), built with nvcc and linked with static
# and with shared libcudart, on the fake: kernel, memset, memcpy, host and
# empty nodes, dependencies added after the nodes, replay in dependency
# order with a kernel's host twin computing the values, kernel parameters
# set in the graph and in an exec, exec update from a clone, queries, the
# debug print, refusals, a capture of the kernel. Every check must pass and
# the device must be empty after each run. Built only where nvcc exists;
# without it this test is reported skipped (77), never passed.
set -euo pipefail
: "${FAKEGPU_SMI:?}" "${FAKEGPU_STATE:?}" "${EBB_TEST_TMP:?}"
. "$(dirname "$0")/../lib/fakegpu.sh"
fakedir=$(dirname "$FAKEGPU_SMI")
if [ ! -x "$fakedir/cudart-graphs-static" ]; then
  echo "SKIPPED: no $fakedir/cudart-graphs-static (built only when nvcc is found)" >&2
  exit 77
fi
export LD_LIBRARY_PATH="$fakedir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export FAKEGPU_MEMORY_MIB=8192
unset CUDA_VISIBLE_DEVICES
for kind in static shared; do
  log="$EBB_TEST_TMP/graphs-$kind.log"
  rm -f "$FAKEGPU_STATE"
  rc=0
  env "${FOREIGN_ENV[@]}" timeout 120 "$fakedir/cudart-graphs-$kind" >"$log" 2>&1 || rc=$?
  if [ "$rc" != 0 ]; then
    fail "cudart-graphs-$kind exited $rc: $(grep -m1 FAIL "$log" || tail -n 3 "$log")"
    continue
  fi
  echo "$kind: $(grep '^graphs:' "$log")"
  used=$("$FAKEGPU_SMI" --query-gpu=memory.used --format=csv,noheader,nounits | tr '\n' ' ')
  [ "$used" = "0 " ] || fail "after cudart-graphs-$kind the device shows $used MiB used"
done
[ "$fails" = 0 ] && echo ok
exit $((fails > 0))
