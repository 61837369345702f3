#!/usr/bin/env bash
# `ebb devices` and `ebb version` against the fake driver: what they print,
# --json, --help, bad usage, and the no-GPU cases (missing library, the
# toolkit's stub, no device), which still exit 0 and offer the CPU device.
# With EBB_REAL_GPU=1 the real driver is used and the fake-only cases are
# skipped (said below).
set -u
. "$(dirname "$0")/../lib/lock.sh"
fail=0
check() { # check DESCRIPTION COMMAND...
  local what=$1; shift
  if ! "$@"; then echo "FAIL: $what"; fail=1; else echo "ok   $what"; fi
}
has() { grep -qF -- "$2" <<<"$1"; }
mkdir -p "$EBB_TEST_TMP"
real=0
if [ "${EBB_REAL_GPU:-}" = 1 ]; then real=1; unset EBB_LIBCUDA EBB_LIBNVML; fi

out=$("$EBB" devices 2>&1); rc=$?
echo "$out"
check "devices exits 0" test $rc -eq 0
check "devices lists cuda:0" has "$out" "cuda:0"
check "devices lists the CPU device" has "$out" "cpu     "
check "devices shows compute capability" has "$out" "compute capability"
check "devices shows VMM support" has "$out" "VMM yes"
if [ $real = 0 ]; then
  check "devices names the fake" has "$out" "fakegpu (ebb test device)"
  check "devices shows total and free" has "$out" "memory: 80.00 GiB total, 80.00 GiB free"
  check "devices says where libcuda was found" has "$out" "found through $EBB_LIBCUDA"
fi

json=$("$EBB" devices --json); rc=$?
check "devices --json exits 0" test $rc -eq 0
check "devices --json is valid JSON with cuda:0 and cpu" python3 -c '
import json, sys
d = json.loads(sys.argv[1])
devs = {x["device"]: x for x in d["devices"]}
assert d["driver"]["loaded"] is True, d
assert "cuda:0" in devs and "cpu" in devs, devs
c = devs["cuda:0"]
assert c["total_bytes"] > 0 and c["free_bytes"] > 0 and c["vmm"] is True, c
assert c["found_through"], c
assert d["nvml"]["loaded"] is True, d
' "$json"
if [ $real = 0 ]; then
  check "devices --json: fake total 80 GiB" python3 -c '
import json, sys
d = json.loads(sys.argv[1])
assert d["devices"][0]["total_bytes"] == 81920 * 2**20, d
assert d["driver"]["version"] == 13000, d' "$json"
fi

out=$("$EBB" devices --device cuda:0); rc=$?
check "devices --device cuda:0 exits 0" test $rc -eq 0
check "devices --device cuda:0 omits the CPU" test "$(grep -c '^cpu' <<<"$out")" -eq 0
out=$("$EBB" devices --device cpu); rc=$?
check "devices --device cpu exits 0" test $rc -eq 0
check "devices --device cpu lists the CPU" grep -q '^cpu' <<<"$out"
check "devices --device cpu lists no CUDA device" test "$(grep -c cuda <<<"$out")" -eq 0

out=$("$EBB" version); rc=$?
echo "$out"
check "version exits 0" test $rc -eq 0
check "version prints ebb's version" has "$out" "ebb 0."
check "version prints the driver version and path" grep -qE "^CUDA driver: [0-9]+\.[0-9]+ \([0-9]+\), libcuda from /" <<<"$out"
check "version prints NVML" grep -qE "^NVML: driver " <<<"$out"
if [ $real = 0 ]; then
  check "version: fake driver 13.0 from EBB_LIBCUDA" has "$out" "CUDA driver: 13.0 (13000), libcuda from $EBB_LIBCUDA"
  check "version says how entry points were resolved" has "$("$EBB" version)" "through cuGetProcAddress_v2, 0 by versioned name, 0 missing"
fi

for cmd in devices version; do
  out=$("$EBB" $cmd --help); rc=$?
  check "$cmd --help exits 0" test $rc -eq 0
  check "$cmd --help prints usage" has "$out" "usage: ebb $cmd"
  "$EBB" $cmd --bogus >/dev/null 2>&1; rc=$?
  check "$cmd --bogus exits 2" test $rc -eq 2
done
"$EBB" devices --device gpu7 >/dev/null 2>&1; rc=$?
check "devices --device gpu7 exits 2" test $rc -eq 2

# No GPU: each case says why, offers the CPU device and exits 0.
out=$(EBB_LIBCUDA=/nonexistent/libcuda.so.1 "$EBB" devices); rc=$?
echo "$out"
check "missing libcuda: exit 0" test $rc -eq 0
check "missing libcuda: says why and offers the CPU" has "$out" "no CUDA device: cannot load the CUDA driver /nonexistent/libcuda.so.1"
check "missing libcuda: ends with the CPU device available" has "$out" "; the CPU device is available"
check "missing libcuda: lists the CPU device" grep -q '^cpu' <<<"$out"
out=$(EBB_LIBCUDA=/nonexistent/libcuda.so.1 "$EBB" version); rc=$?
check "missing libcuda: version exits 0" test $rc -eq 0
check "missing libcuda: version says none and why" has "$out" "CUDA driver: none (cannot load the CUDA driver /nonexistent/libcuda.so.1"

if [ $real = 0 ]; then
  out=$(FAKEGPU_STATE=$EBB_TEST_TMP/stub.state FAKEGPU_STUB=1 "$EBB" devices); rc=$?
  echo "$out"
  check "stub: exit 0" test $rc -eq 0
  check "stub: says it is the toolkit's stub" has "$out" "is the stub libcuda from the CUDA toolkit, not a driver"
  check "stub: offers the CPU" has "$out" "the CPU device is available"
  out=$(FAKEGPU_STATE=$EBB_TEST_TMP/nodev.state FAKEGPU_DEVICES=0 "$EBB" devices); rc=$?
  echo "$out"
  check "no device: exit 0" test $rc -eq 0
  check "no device: says so" grep -qE "no CUDA device: the CUDA driver at .* reports (no device|0 devices)" <<<"$out"
  out=$(FAKEGPU_STATE=$EBB_TEST_TMP/two.state FAKEGPU_DEVICES=2 "$EBB" devices); rc=$?
  check "two devices: cuda:0 listed" grep -q '^cuda:0' <<<"$out"
  check "two devices: cuda:1 listed" grep -q '^cuda:1' <<<"$out"
else
  echo "SKIP (EBB_REAL_GPU=1): stub / no-device / two-device cases need the fake driver"
fi

# Probing creates no context: nothing is left on the device afterwards, and
# nothing was held while it ran (the probe is the whole process).
if [ $real = 0 ]; then
  used=$("$FAKEGPU_SMI" --query-gpu=memory.used --format=csv,noheader,nounits)
  check "after devices/version the fake device holds 0 MiB" test "$used" -eq 0
fi
exit $fail
