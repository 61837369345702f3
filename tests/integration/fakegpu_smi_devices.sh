#!/usr/bin/env bash
# Four fake devices of 8, 8, 4 and 4 GiB (FAKEGPU_MEMORY_MIB as a list):
# fakegpu-hold holds 7 GiB of device 2 (--device 2 --alloc 7168 --wait);
# fakegpu-smi shows it on device 2 only, per device with the index field, and
# with --id=N / -i N / -i 0,2 as nvidia-smi selects devices; bad ids are
# refused. The holder killed: device 2 is empty again. A device lost through
# FAKEGPU_FAIL_DEVICE=3:lost, or from outside with fakegpu-smi
# --fake-lose-device=1, shows as lost while the others answer.
set -euo pipefail
: "${FAKEGPU_SMI:?}" "${FAKEGPU_STATE:?}" "${EBB_TEST_TMP:?}"
. "$(dirname "$0")/../lib/lock.sh"
rm -rf "$EBB_TEST_TMP" "$FAKEGPU_STATE"
mkdir -p "$EBB_TEST_TMP"
HOLD="$(dirname "$FAKEGPU_SMI")/fakegpu-hold"
export FAKEGPU_MEMORY_MIB=8192,8192,4096,4096
unset FAKEGPU_DEVICES
fail() { echo "FAIL: $*" >&2; exit 1; }
smi() { "$FAKEGPU_SMI" "$@"; }
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done' EXIT

got=$(smi --query-gpu=index,memory.used,memory.total --format=csv,noheader,nounits)
want=$'0, 0, 8192\n1, 0, 8192\n2, 0, 4096\n3, 0, 4096'
[ "$got" = "$want" ] || fail "four idle devices: got '$got', want '$want'"

# Holds 7 GiB on device 2 until killed. Its first line is the alloc's answer.
coproc H { exec "$HOLD" --device 2 --alloc 7168 --wait; }
hpid=$H_PID
pids+=("$hpid")
# 7168 MiB do not fit on a 4 GiB device: the holder says so.
for _ in init ctx alloc; do read -r -t 10 line <&"${H[0]}" || fail "fakegpu-hold said nothing"; done
[ "$line" = "err 2" ] || fail "7 GiB on a 4 GiB device answered '$line', want 'err 2' (out of memory)"
kill -9 "$hpid"; wait "$hpid" 2>/dev/null || true

export FAKEGPU_MEMORY_MIB=8192,8192,8192,8192
rm -f "$FAKEGPU_STATE"
coproc H { exec "$HOLD" --device 2 --alloc 7168 --wait; }
hpid=$H_PID
pids+=("$hpid")
for _ in init ctx alloc; do read -r -t 10 line <&"${H[0]}" || fail "fakegpu-hold said nothing"; done
[[ $line == ok* ]] || fail "fakegpu-hold --device 2 --alloc 7168 answered '$line'"

got=$(smi --query-gpu=index,memory.used,memory.free --format=csv,noheader,nounits)
want=$'0, 0, 8192\n1, 0, 8192\n2, 7468, 724\n3, 0, 8192'
echo "holding 7 GiB on device 2:"; echo "$got"
[ "$got" = "$want" ] || fail "per device: got '$got', want '$want'"
[ "$(smi --id=2 --query-gpu=index,memory.used --format=csv,noheader,nounits)" = "2, 7468" ] ||
  fail "--id=2 shows '$(smi --id=2 --query-gpu=index,memory.used --format=csv,noheader,nounits)'"
[ "$(smi -i 2 --query-gpu=memory.used --format=csv,noheader)" = "7468 MiB" ] || fail "-i 2 with units"
got=$(smi -i 0,2 --query-gpu=index,memory.used --format=csv,noheader,nounits)
[ "$got" = $'0, 0\n2, 7468' ] || fail "-i 0,2 shows '$got'"
[ "$(smi --id=2 --query-compute-apps=pid,used_memory --format=csv,noheader,nounits)" = "$hpid, 7468" ] ||
  fail "--id=2 apps: '$(smi --id=2 --query-compute-apps=pid,used_memory --format=csv,noheader,nounits)'"
[ -z "$(smi --id=0 --query-compute-apps=pid,used_memory --format=csv,noheader,nounits)" ] ||
  fail "the holder is listed on device 0"
got=$(smi --query-compute-apps=pid,gpu_bus_id,used_memory --format=csv,noheader,nounits)
[ "$got" = "$hpid, 00000000:1A:00.0, 7468" ] || fail "apps on every device: '$got'"
rc=0; smi --id=x --query-gpu=index --format=csv >/dev/null 2>"$EBB_TEST_TMP/err" || rc=$?
[ "$rc" = 2 ] && grep -q "Invalid device ID 'x'" "$EBB_TEST_TMP/err" || fail "--id=x: exit $rc, $(cat "$EBB_TEST_TMP/err")"
rc=0; smi --id=4 --query-gpu=index --format=csv >/dev/null 2>&1 || rc=$?
[ "$rc" = 6 ] || fail "--id=4 of 4 devices exited $rc, want 6 (No devices were found)"

kill -9 "$hpid"; wait "$hpid" 2>/dev/null || true
got=$(smi --query-gpu=memory.used --format=csv,noheader,nounits | tr '\n' ' ')
[ "$got" = "0 0 0 0 " ] || fail "after the holder was killed: '$got'"

# Device 3 lost: the first call on it that needs a context loses it.
coproc L { FAKEGPU_FAIL_DEVICE=3:lost exec "$HOLD"; }
lpid=$L_PID
pids+=("$lpid")
say() { echo "$1" >&"${L[1]}"; read -r -t 10 line <&"${L[0]}" || fail "no answer to '$1'"; }
say init; say "ctx 3"; say "alloc 1"
[ "$line" = "err 999" ] || fail "alloc on the failing device answered '$line', want 'err 999'"
got=$(smi --query-gpu=index,memory.used --format=csv,noheader,nounits)
echo "device 3 lost:"; echo "$got"
[ "$(sed -n 4p <<<"$got")" = "3, [GPU is lost]" ] || fail "lost device 3 shows '$got'"
[ "$(sed -n 1p <<<"$got")" = "0, 0" ] || fail "device 0 beside a lost one shows '$got'"
say "ctx 0"; say "alloc 16"
[[ $line == ok* ]] || fail "device 0 beside a lost one: alloc answered '$line'"
# From outside, while a process works on device 1: fakegpu-smi
# --fake-lose-device=1 takes it off the bus now; that process's next call on
# it answers 999, and device 0 still works.
say "ctx 1"; say "alloc 16"
[[ $line == ok* ]] || fail "device 1 before it was lost: alloc answered '$line'"
smi --fake-lose-device=1 || fail "--fake-lose-device=1 failed"
say "alloc 16"
[ "$line" = "err 999" ] || fail "alloc on device 1 after --fake-lose-device=1 answered '$line'"
[ "$(smi -i 1 --query-gpu=memory.used --format=csv,noheader)" = "[GPU is lost]" ] ||
  fail "device 1 not shown lost"
rc=0; smi --fake-lose-device=9 2>/dev/null || rc=$?
[ "$rc" = 2 ] || fail "--fake-lose-device=9 of 4 devices exited $rc, want 2"
say "ctx 0"; say "alloc 16"
[[ $line == ok* ]] || fail "device 0 beside lost ones: alloc answered '$line'"
say exit
echo ok
