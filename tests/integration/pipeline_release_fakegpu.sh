#!/usr/bin/env bash
# Acceptance (issue #4): on the fake GPU, measured from outside with
# fakegpu-smi from a separate process (the EBB_STAGE_HOOK command), a
# three-stage synthetic pipeline (weights 1, 4 and 2 GiB, with caches):
#   - holds at most the context between stages, nothing after the job;
#   - each stage's "[X] released N MiB of GPU memory" line matches the drop
#     fakegpu-smi measured across its release within 2 MiB;
#   - with --release never the memory stays and the release lines are absent.
set -u
: "${EBB:?}"
. "$(dirname "$0")/../lib/fakegpu.sh"
export FAKEGPU_CONTEXT_MIB=300 FAKEGPU_MEMORY_MIB=16384

cat > "$T/cfg.json" <<'JSON'
{"pipelines": {"big": {"stages": [
  {"stage": "synthetic", "name": "a", "cache": false, "options":
    {"weights_mib": 1024, "activations_mib": 256, "cache_mib": 256, "touch": "sample"}},
  {"stage": "synthetic", "name": "b", "cache": false, "options":
    {"weights_mib": 4096, "activations_mib": 256, "cache_mib": 512, "touch": "sample"}},
  {"stage": "synthetic", "name": "c", "cache": false, "options":
    {"weights_mib": 2048, "activations_mib": 512, "cache_mib": 256, "touch": "sample"}}]}}}
JSON
# the same shape at a tenth of the size, for the JSON and never runs (debug
# builds poison freed device memory, which touches every byte on the fake)
sed -e 's/"weights_mib": 1024/"weights_mib": 128/; s/"weights_mib": 4096/"weights_mib": 256/' \
    -e 's/"weights_mib": 2048/"weights_mib": 192/' "$T/cfg.json" > "$T/small.json"
echo "any input" > "$T/input.txt"

# The hook: what fakegpu-smi says this ebb process holds (0 when it is not
# listed), appended as "EVENT STAGE RELEASED_BYTES USED_MIB".
export HOOK_LOG="$T/hook.log" EBB_STAGE_HOOK="sh $SMI_HOOK"

# --- after-stage (the default) -------------------------------------------------
"$EBB" run --pipeline big --config "$T/cfg.json" --device cuda --no-cache -o "$T/out" \
  --verbose "$T/input.txt" > "$T/stdout" 2> "$T/stderr"
rc=$?
cat "$T/stdout" "$T/hook.log"
[ "$rc" = 0 ] || { fail "ebb run exited $rc: $(cat "$T/stderr")"; }

used_at() { awk -v e="$1" -v s="$2" '$1 == e && $2 == s {print $4}' "$HOOK_LOG"; }
for s in a b c; do
  before=$(used_at before-release $s)
  after=$(used_at after-stage $s)
  [ -n "$before" ] && [ -n "$after" ] || { fail "no hook lines for stage $s"; continue; }
  # between stages: at most the context
  [ "$after" -le 300 ] || fail "after stage $s the process holds $after MiB (context is 300)"
  line=$(grep -E "^\[$s\] released [0-9]+ MiB of GPU memory$" "$T/stdout")
  [ -n "$line" ] || { fail "no release line for $s"; continue; }
  n=$(echo "$line" | awk '{print $3}')
  drop=$((before - after))
  diff=$((n - drop)); diff=${diff#-}
  echo "stage $s: held $before MiB before release, $after after; measured drop $drop MiB, log says $n MiB"
  [ "$diff" -le 2 ] || fail "stage $s: log says $n MiB, fakegpu-smi measured $drop MiB"
  # the debug line: the driver's own free-memory delta confirms the figure
  conf=$(grep -E "^\[$s\] driver confirms: .*\(\+[0-9]+ MiB; ebb handed back $n MiB\)$" "$T/stdout")
  [ -n "$conf" ] || fail "stage $s: no driver confirmation line"
  dd=$(echo "$conf" | sed -E 's/.*\(\+([0-9]+) MiB;.*/\1/')
  d2=$((dd - n)); d2=${d2#-}
  [ "${d2:-9}" -le 2 ] || fail "stage $s: the driver's free memory rose $dd MiB, ebb says $n"
done
# the memory was really held: b's weights and cache at least
b_before=$(used_at before-release b)
[ "${b_before:-0}" -ge $((4096 + 512)) ] || fail "stage b held only ${b_before:-?} MiB before release"
# after the job: nothing, and the context's line says so
job_used=$(used_at after-job big)
[ "${job_used:-x}" = 0 ] || fail "after the job the process holds ${job_used:-?} MiB (want 0)"
grep -qE "^\[pipeline big\] idle: device context released, 300 MiB of GPU memory back to the driver; ebb holds nothing on cuda:0$" "$T/stdout" ||
  fail "no context release line"
# after exit: fakegpu-smi lists no process and the device is empty
apps=$("$FAKEGPU_SMI" --query-compute-apps=pid,used_memory --format=csv,noheader,nounits)
[ -z "$apps" ] || fail "after exit fakegpu-smi still lists: $apps"
used_total=$("$FAKEGPU_SMI" --query-gpu=memory.used --format=csv,noheader,nounits)
[ "$used_total" = 0 ] || fail "after exit the device has $used_total MiB used"

# --- JSON log format: the same fields ------------------------------------------------
: > "$HOOK_LOG"
"$EBB" run --pipeline big --config "$T/small.json" --device cuda --no-cache -o "$T/out" \
  --log-format json "$T/input.txt" > "$T/json.out" 2> "$T/json.err" ||
  fail "json run exited $?: $(cat "$T/json.err")"
python3 - "$T/json.out" <<'PY' || fail "JSON log lines"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rel = {e["stage"]: e for e in ev if e.get("event") == "released"}
done = {e["stage"]: e for e in ev if e.get("event") == "stage_done"}
ok = True
for s in "abc":
    r, d = rel.get(s), done.get(s)
    if not r or not d:
        print("missing events for", s); ok = False; continue
    for k in ("released_bytes", "released_mib", "driver_free_before", "driver_free_after",
              "driver_freed_bytes"):
        if k not in r: print(s, "released event lacks", k); ok = False
    if r["released_mib"] != r["released_bytes"] >> 20: ok = False
    # the driver's own figure confirms ebb's within 2 MiB
    if abs(r["driver_freed_bytes"] - r["released_bytes"]) > 2 << 20:
        print(s, "driver says", r["driver_freed_bytes"], "ebb says", r["released_bytes"]); ok = False
    for k in ("seconds", "peak_bytes"):
        if k not in d: print(s, "stage_done lacks", k); ok = False
    if r["msg"] != "released %d MiB of GPU memory" % r["released_mib"]: ok = False
sys.exit(0 if ok else 1)
PY

# --- --release never: the memory stays, no release lines --------------------------
rm -f "$FAKEGPU_STATE"
: > "$HOOK_LOG"
"$EBB" run --pipeline big --config "$T/small.json" --device cuda --no-cache -o "$T/out" \
  --release never "$T/input.txt" > "$T/never.out" 2> "$T/never.err"
rc=$?
cat "$T/never.out" "$HOOK_LOG"
[ "$rc" = 0 ] || fail "never: ebb run exited $rc: $(cat "$T/never.err")"
grep -q "released" "$T/never.out" && fail "never: release lines present"
held=$(used_at after-stage c)
want=$((300 + 128 + 256 + 256 + 512 + 192 + 256))
[ "${held:-0}" -ge "$want" ] || fail "never: after c the process holds ${held:-?} MiB, want >= $want"
held=$(used_at after-job big)
[ "${held:-0}" -ge "$want" ] || fail "never: after the job the process holds ${held:-?} MiB"
apps=$("$FAKEGPU_SMI" --query-compute-apps=pid,used_memory --format=csv,noheader,nounits)
[ -z "$apps" ] || fail "never: after exit fakegpu-smi still lists: $apps"

[ "$fails" = 0 ] && echo "PASS" || echo "$fails failure(s)"
exit $((fails > 0))
