#!/usr/bin/env bash
# Programs built with the CUDA toolkit's nvcc run on the fake driver, with
# libcudart linked statically (nvcc's default) and shared (libcudart.so.13):
# tests/fakegpu/cudart_client.cu checks cudaGetDeviceCount against
# FAKEGPU_DEVICES, malloc/free, pinned memory, the default pool
# (cudaMallocAsync), copies and memset byte for byte, streams, priorities,
# events, a kernel launch (no host twin: a no-op) and managed memory of twice
# the device. Here, from outside: cudaMemGetInfo's free equals fakegpu-smi's,
# fakegpu-smi counts the client's kernel launch, and the device is empty after.
# The clients are built only where nvcc exists; without them this test is
# reported skipped (77), never passed.
set -euo pipefail
: "${FAKEGPU_SMI:?}" "${FAKEGPU_STATE:?}" "${EBB_TEST_TMP:?}" "${EBB_BUILD_DIR:?}"
. "$(dirname "$0")/../lib/fakegpu.sh"
fakedir=$(dirname "$FAKEGPU_SMI")
if [ ! -x "$fakedir/cudart-client-static" ]; then
  echo "SKIPPED: no $fakedir/cudart-client-static (built only when nvcc is found)" >&2
  exit 77
fi


export LD_LIBRARY_PATH="$fakedir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
unset CUDA_VISIBLE_DEVICES

run_client() { # KIND DEVICES
  local kind=$1 devices=$2 log="$EBB_TEST_TMP/$1-$2.log"
  rm -f "$FAKEGPU_STATE"
  mkfifo "$EBB_TEST_TMP/in"
  # Small devices: the client writes and reads managed memory of twice one.
  env "${FOREIGN_ENV[@]}" FAKEGPU_DEVICES=$devices FAKEGPU_MEMORY_MIB=64 FAKEGPU_CONTEXT_MIB=16 \
    timeout 120 "$fakedir/cudart-client-$kind" "$devices" --wait <"$EBB_TEST_TMP/in" >"$log" 2>&1 &
  local pid=$!
  exec 7>"$EBB_TEST_TMP/in"
  local i
  for i in $(seq 1 600); do
    grep -q '^free_mib\|^FAIL' "$log" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  grep -q '^free_mib' "$log" || { exec 7>&-; wait "$pid" || true; cat "$log" >&2; fail "$kind client ($devices devices) did not get through its checks"; }
  local free smi launches cpid
  free=$(awk '/^free_mib/ {print $2}' "$log")
  cpid=$(awk '/^pid/ {print $2}' "$log") # the client, a child of timeout
  smi=$("$FAKEGPU_SMI" -i 0 --query-gpu=memory.free --format=csv,noheader,nounits)
  launches=$("$FAKEGPU_SMI" -i 0 --query-compute-apps=pid,kernel_launches --format=csv,noheader,nounits |
    awk -F', *' -v p="$cpid" '$1 == p {print $2}')
  exec 7>&-
  wait "$pid" || { cat "$log" >&2; fail "$kind client ($devices devices) failed"; }
  grep -q '^ok$' "$log" || { cat "$log" >&2; fail "$kind client did not finish"; }
  [ "$free" = "$smi" ] || fail "$kind: cudaMemGetInfo says $free MiB free, fakegpu-smi $smi MiB"
  [ "${launches:-0}" -ge 1 ] || fail "$kind: fakegpu-smi counted ${launches:-no} kernel launches for pid $cpid"
  grep -q "has no host twin: launched as a no-op" "$log" ||
    fail "$kind: no notice on stderr that the kernel was a no-op"
  [ "$(grep -c 'has no host twin' "$log")" = 1 ] || fail "$kind: the no-op notice came more than once"
  local used
  used=$("$FAKEGPU_SMI" --query-gpu=memory.used --format=csv,noheader,nounits | tr '\n' ' ')
  case "$used" in *[1-9]*) fail "$kind: after the client exited the device shows $used MiB used" ;; esac
  rm -f "$EBB_TEST_TMP/in"
  echo "$kind, $devices device(s): free $free MiB = fakegpu-smi, $launches launch(es) counted"
}

run_client static 1
run_client shared 1
run_client static 2
if [ -x "$fakedir/cudart-client-shared" ]; then :; else fail "cudart-client-shared was not built"; fi
echo ok
exit $((fails > 0))
