#!/usr/bin/env bash
# fakegpu-smi prints what nvidia-smi prints for the same flags: csv with a
# header of "name [MiB]" columns, values "N MiB" unless nounits, no header
# with noheader, fields separated by ", ", one line per GPU / per process.
set -euo pipefail
: "${FAKEGPU_SMI:?}" "${FAKEGPU_STATE:?}" "${EBB_TEST_TMP:?}"
. "$(dirname "$0")/../lib/lock.sh"
mkdir -p "$EBB_TEST_TMP"
rm -f "$FAKEGPU_STATE"
. "$(dirname "$0")/../lib/hold.sh"
SMI="$FAKEGPU_SMI"
fail() { echo "FAIL: $*" >&2; exit 1; }
expect() { # expect NAME ACTUAL EXPECTED
  [[ "$2" == "$3" ]] || fail "$1: got
$2
expected
$3"
}

q=memory.used,memory.free,memory.total
# Nobody on the device yet.
expect "idle csv" "$("$SMI" --query-gpu=$q --format=csv)" \
"memory.used [MiB], memory.free [MiB], memory.total [MiB]
0 MiB, 81920 MiB, 81920 MiB"
expect "idle apps csv" "$("$SMI" --query-compute-apps=pid,used_memory --format=csv)" \
"pid, used_gpu_memory [MiB]"
expect "idle apps noheader" "$("$SMI" --query-compute-apps=pid,used_memory --format=csv,noheader,nounits)" ""

start_hold
say init
say ctx
say "alloc 3" # rounds to 4 MiB
say pid
pid=${reply#ok }

expect "csv" "$("$SMI" --query-gpu=$q --format=csv)" \
"memory.used [MiB], memory.free [MiB], memory.total [MiB]
304 MiB, 81616 MiB, 81920 MiB"
expect "csv,nounits" "$("$SMI" --query-gpu=$q --format=csv,nounits)" \
"memory.used [MiB], memory.free [MiB], memory.total [MiB]
304, 81616, 81920"
expect "csv,noheader" "$("$SMI" --query-gpu=$q --format=csv,noheader)" \
"304 MiB, 81616 MiB, 81920 MiB"
expect "csv,noheader,nounits" "$("$SMI" --query-gpu=$q --format=csv,noheader,nounits)" \
"304, 81616, 81920"
expect "apps csv" "$("$SMI" --query-compute-apps=pid,used_memory --format=csv)" \
"pid, used_gpu_memory [MiB]
$pid, 304 MiB"
expect "apps csv,noheader,nounits" \
  "$("$SMI" --query-compute-apps=pid,used_memory --format=csv,noheader,nounits)" "$pid, 304"
expect "name" "$("$SMI" --query-gpu=index,name --format=csv,noheader)" \
"0, fakegpu (ebb test device)"
"$SMI" -L | grep -q '^GPU 0: fakegpu (ebb test device) (UUID: GPU-' || fail "-L: $("$SMI" -L)"

# Errors as nvidia-smi: an unknown field, a query without --format.
if "$SMI" --query-gpu=memory.bogus --format=csv >/dev/null 2>"$EBB_TEST_TMP/err"; then
  fail "unknown field accepted"
fi
grep -q 'memory.bogus' "$EBB_TEST_TMP/err" || fail "unknown field not named"
if "$SMI" --query-gpu=$q >/dev/null 2>&1; then fail "query without --format accepted"; fi

say exit
wait "$apid" || true

# Several GPUs (a device of its own): one line each.
export FAKEGPU_STATE="$EBB_TEST_TMP/two.state" FAKEGPU_DEVICES=2 FAKEGPU_MEMORY_MIB=4096
expect "two gpus" "$("$SMI" --query-gpu=index,memory.used,memory.total --format=csv,noheader,nounits)" \
"0, 0, 4096
1, 0, 4096"
FAKEGPU_DEVICES=0 "$SMI" --query-gpu=$q --format=csv >/dev/null 2>&1 && fail "no devices: exit 0"
echo ok
