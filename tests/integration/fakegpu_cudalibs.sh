#!/usr/bin/env bash
# The CUDA math libraries start on the fake driver: a program built with nvcc
# against the toolkit's cuRAND, cuBLAS, cuSOLVER and cuSPARSE
# (tests/fakegpu/cudalibs_client.cu) creates their handles, copies through
# cuBLAS and through its own __device__/__constant__ variables, and checks
# each answer exactly (no kernel is launched). Here, from outside: the client
# passes all its checks, and the device is empty after it exited (the
# libraries' module variables went with their context). Built only where nvcc
# and those libraries exist; without the client this test is reported skipped
# (77), never passed.
set -euo pipefail
: "${FAKEGPU_SMI:?}" "${FAKEGPU_STATE:?}" "${EBB_TEST_TMP:?}"
. "$(dirname "$0")/../lib/fakegpu.sh"
fakedir=$(dirname "$FAKEGPU_SMI")
client="$fakedir/cudalibs-client"
if [ ! -x "$client" ]; then
  echo "SKIPPED: no $client (built only when nvcc and the CUDA math libraries are found)" >&2
  exit 77
fi
export LD_LIBRARY_PATH="$fakedir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
unset CUDA_VISIBLE_DEVICES FAKEGPU_TRACE
rm -f "$FAKEGPU_STATE"
log="$EBB_TEST_TMP/cudalibs.log"
if env "${FOREIGN_ENV[@]}" FAKEGPU_DEVICES=1 FAKEGPU_MEMORY_MIB=4096 FAKEGPU_CONTEXT_MIB=16 timeout 120 "$client" >"$log" 2>&1; then
  grep -q '^ok$' "$log" || { cat "$log" >&2; fail "the client exited 0 without finishing its checks"; }
else
  cat "$log" >&2
  fail "the client failed: $(grep -c '^FAIL' "$log") failed check(s), first: $(grep -m1 '^FAIL' "$log" || echo none)"
fi
used=$("$FAKEGPU_SMI" --query-gpu=memory.used --format=csv,noheader,nounits | tr '\n' ' ')
case "$used" in *[1-9]*) fail "after the client exited the device shows $used MiB used" ;; esac
echo "cuRAND, cuBLAS, cuSOLVER, cuSPARSE started on the fake; $(grep -c . "$log") lines of output"
exit $((fails > 0))
