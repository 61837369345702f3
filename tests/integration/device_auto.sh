#!/usr/bin/env bash
# `ebb run --device auto` on three fake devices of 8 GiB takes the one with
# the most free memory as the driver (NVML) reports it, memory held by other
# processes (fakegpu-hold) counted as taken: with 2 GiB held on device 0 and
# 5 GiB on device 1 it runs on cuda:2 (fakegpu-smi --id=2 sees the stage's
# memory, --id=0/1 never see ebb); with the holds moved it follows; with
# nothing held it takes the lowest number (cuda:0).
set -u
: "${EBB:?}" "${EBB_BUILD_DIR:?}"
. "$(dirname "$0")/../lib/fakegpu.sh"
HOLD=$EBB_BUILD_DIR/fakegpu/fakegpu-hold
export FAKEGPU_MEMORY_MIB=8192,8192,8192 FAKEGPU_CONTEXT_MIB=300
HOLDERS=()
cleanup() { for h in "${HOLDERS[@]}"; do kill "$h" 2>/dev/null; done; wait; }
trap 'cleanup >/dev/null 2>&1 || true' EXIT
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {"p": {"stages": [{"stage": "synthetic", "name": "s", "cache": false,
  "options": {"weights_mib": 1024, "touch": "sample"}}]}}}
JSON
echo "any input" > "$T/input.txt"
# before the stage's release: MiB ebb holds on each device, per fakegpu-smi --id
cat > "$T/hook.sh" <<'SH'
[ "$EBB_HOOK_EVENT" = before-release ] || exit 0
for d in 0 1 2; do
  "$FAKEGPU_SMI" --id=$d --query-compute-apps=pid,used_memory --format=csv,noheader,nounits |
    awk -F', *' -v p="$EBB_HOOK_PID" -v d=$d '$1 == p {s += $2} END {printf "%d:%d ", d, s + 0}'
done >> "$HOOK_LOG"
echo >> "$HOOK_LOG"
SH
export EBB_STAGE_HOOK="sh $T/hook.sh"

hold() { # DEVICE MIB
  "$HOLD" --device "$1" --alloc "$2" --wait < /dev/null > /dev/null 2>&1 &
  HOLDERS+=($!)
  for _ in $(seq 100); do
    [ "$("$FAKEGPU_SMI" --id="$1" --query-gpu=memory.used --format=csv,noheader,nounits)" -ge "$2" ] && return
    sleep 0.1
  done
  fail "fakegpu-hold did not take $2 MiB of device $1"
}
release_holds() {
  for h in "${HOLDERS[@]}"; do kill "$h" 2>/dev/null; wait "$h" 2>/dev/null; done
  HOLDERS=()
}
run_auto() { # EXPECTED_DEVICE CASE
  export HOOK_LOG="$T/hook.$2.log"
  "$EBB" run --pipeline p --config "$T/cfg.json" "$T/input.txt" -o "$T/out.$2" \
    --device auto > "$T/log.$2" 2>&1 || fail "$2: ebb run failed: $(cat "$T/log.$2")"
  grep -q "ebb holds nothing on cuda:$1\$" "$T/log.$2" ||
    fail "$2: the job did not run on cuda:$1: $(cat "$T/log.$2")"
  local seen
  seen=$(head -1 "$HOOK_LOG" 2>/dev/null)
  for d in 0 1 2; do
    local mib=${seen#*$d:}; mib=${mib%% *}
    if [ "$d" = "$1" ]; then
      [ "${mib:-0}" -ge 1024 ] || fail "$2: fakegpu-smi --id=$d saw ${mib:-no} MiB of ebb during the stage ($seen)"
    else
      [ "${mib:-1}" = 0 ] || fail "$2: fakegpu-smi --id=$d saw ebb hold ${mib:-?} MiB ($seen)"
    fi
  done
}

hold 0 2048
hold 1 5120
run_auto 2 two_held
grep -q 'auto: cuda:2 has the most free memory' "$T/log.two_held" ||
  fail "no 'auto: cuda:2 has the most free memory' line: $(cat "$T/log.two_held")"
release_holds
hold 0 3072
hold 2 1024
run_auto 1 moved
release_holds
run_auto 0 none_held

[ $fails = 0 ] && echo "device_auto: all checks passed"
exit $((fails > 0))
