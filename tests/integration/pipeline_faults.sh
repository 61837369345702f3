#!/usr/bin/env bash
# Acceptance (issue #4), the fault matrix on the fake GPU: fail at load, run
# and unload of each stage position; FAKEGPU_FAIL_ALLOC_AT at each device
# allocation of the job; SIGINT and SIGTERM mid-stage. Each run must give the
# right exit status and one clear message, hold at most the context between
# stages and nothing after the job (fakegpu-smi from the EBB_STAGE_HOOK
# process), and leave nothing on the device once it has exited. Under the
# sanitizer build a leak of host memory makes ebb exit 23 (LeakSanitizer),
# which fails the exact exit status checks below.
set -u
: "${EBB:?}"
. "$(dirname "$0")/../lib/fakegpu.sh"
export FAKEGPU_CONTEXT_MIB=300
echo "input" > "$T/input.txt"

cat > "$T/hook.sh" <<'SH'
sh "$SMI_HOOK"
case "$EBB_HOOK_EVENT/$EBB_HOOK_STAGE" in
  "after-stage/$SIGNAL_AFTER")   # signal ebb while the next stage runs
    (sleep 0.4; kill -"$SIGNAL" "$EBB_HOOK_PID") > /dev/null 2>&1 & ;;
esac
SH
export HOOK_LOG="$T/hook.log" SIGNAL_AFTER=none SIGNAL=INT SMI_HOOK
export EBB_STAGE_HOOK="bash $T/hook.sh"

# config FAIL_AT FAIL_WHERE [RUN_MS_B]
config() {
  local fa=$1 fw=$2 ms=${3:-0}
  f() { [ "$fa" = "$1" ] && echo "\"$fw\"" || echo '""'; }
  cat > "$T/cfg.json" <<JSON
{"pipelines": {"p": {"stages": [
  {"stage": "synthetic", "name": "a", "cache": false, "options":
    {"weights_mib": 64, "activations_mib": 16, "cache_mib": 16, "fail": $(f a)}},
  {"stage": "synthetic", "name": "b", "cache": false, "options":
    {"weights_mib": 96, "activations_mib": 16, "cache_mib": 16, "outside_mib": 8,
     "run_ms": $ms, "fail": $(f b)}},
  {"stage": "synthetic", "name": "c", "cache": false, "options":
    {"weights_mib": 32, "activations_mib": 16, "cache_mib": 16, "leak_mib": 4, "fail": $(f c)}}]}}}
JSON
}

# check_run NAME RC_WANT [STDERR_PATTERN...]
check_run() {
  local name=$1 want=$2
  shift 2
  [ "$rc" = "$want" ] || fail "$name: exit $rc, want $want; stderr: $(cat "$T/err")"
  for pat in "$@"; do
    grep -qE "$pat" "$T/err" || fail "$name: stderr lacks /$pat/: $(cat "$T/err")"
  done
  if [ "$want" != 0 ]; then
    local n; n=$(grep -c "^ebb run:" "$T/err")
    [ "$n" = 1 ] || fail "$name: want one message, got $n: $(cat "$T/err")"
  fi
  # inside the run: at most the context between stages, nothing after the job
  while read -r ev st rel used; do
    case $ev in
      after-stage) [ "$used" -le 300 ] || fail "$name: after stage $st the process holds $used MiB" ;;
      after-job) [ "$used" = 0 ] || fail "$name: after the job the process holds $used MiB" ;;
    esac
  done < "$HOOK_LOG"
  grep -q '^after-job ' "$HOOK_LOG" || fail "$name: the after-job hook did not run"
  # after exit: nothing on the device
  apps=$("$FAKEGPU_SMI" --query-compute-apps=pid,used_memory --format=csv,noheader,nounits)
  [ -z "$apps" ] || fail "$name: after exit fakegpu-smi lists: $apps"
  used=$("$FAKEGPU_SMI" --query-gpu=memory.used --format=csv,noheader,nounits)
  [ "$used" = 0 ] || fail "$name: after exit the device has $used MiB used"
}

run_ebb() {
  : > "$HOOK_LOG"
  "$EBB" run --pipeline p --config "$T/cfg.json" --device cuda --no-cache -o "$T/out" \
    "$T/input.txt" > "$T/out.log" 2> "$T/err"
  rc=$?
}

# 1. fail at load / run / unload of each position
for where in load run unload; do
  for s in a b c; do
    config "$s" "$where"
    run_ebb
    if [ "$where" = load ]; then what="failed to load"
    elif [ "$where" = run ]; then what="failed"
    else what="failed to unload"; fi
    check_run "fail=$where at $s" 1 "job failed: stage '$s'.* $what" "fail=$where"
    echo "fail=$where at $s: exit $rc: $(grep "^ebb run" "$T/err")"
  done
done

# 2. the Nth device allocation fails. The allocator answers an out-of-memory
# with trim + one retry, so most are absorbed (exit 0, every stage done); the
# raw driver allocation of b's outside_mib has no retry (exit 1). Either way
# nothing may remain.
config none none
run_ebb
check_run "no fault" 0
failed_any=0
for n in $(seq 1 12); do
  FAKEGPU_FAIL_ALLOC_AT=$n run_ebb
  if [ "$rc" = 0 ]; then
    check_run "FAKEGPU_FAIL_ALLOC_AT=$n" 0
    [ "$(grep -c '\] done in' "$T/out.log")" = 3 ] || fail "alloc $n: exit 0 without 3 stages done"
  else
    failed_any=1
    check_run "FAKEGPU_FAIL_ALLOC_AT=$n" 1 "out of device memory" "stage '[abc]'"
  fi
  echo "FAKEGPU_FAIL_ALLOC_AT=$n: exit $rc $(grep '^ebb run' "$T/err")"
done
[ "$failed_any" = 1 ] || fail "no injected allocation failure reached the job"

# a real out-of-memory: the device is too small for stage b's activations
rm -f "$FAKEGPU_STATE"
FAKEGPU_MEMORY_MIB=420 run_ebb
check_run "device too small" 1 "out of device memory" "stage 'b'"
echo "FAKEGPU_MEMORY_MIB=420: exit $rc $(grep '^ebb run' "$T/err")"
rm -f "$FAKEGPU_STATE"

# 3. signals mid-stage: b runs 20 s and is cancelled 0.4 s in
for sig in INT TERM; do
  config none none 20000
  export SIGNAL_AFTER=a SIGNAL=$sig
  start=$(date +%s)
  run_ebb
  took=$(( $(date +%s) - start ))
  check_run "SIG$sig" 1 "cancelled by SIG$sig" "stage 'b' was cancelled"
  [ "$took" -lt 10 ] || fail "SIG$sig: the job took $took s to stop"
  grep -q '^after-stage b ' "$HOOK_LOG" || fail "SIG$sig: b was not released (no after-stage hook)"
  grep -q '^\[c\]' "$T/out.log" && fail "SIG$sig: stage c ran after the cancel"
  echo "SIG$sig: exit $rc in ${took}s: $(grep "^ebb run" "$T/err")"
done
export SIGNAL_AFTER=none

[ "$fails" = 0 ] && echo "PASS" || echo "$fails failure(s)"
exit $((fails > 0))
