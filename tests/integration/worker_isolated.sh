#!/usr/bin/env bash
# Isolated stages on the fake GPU, measured from outside with fakegpu-smi:
#   - an isolated synthetic stage (weights 1 GiB) runs in a worker process:
#     during the run fakegpu-smi lists the WORKER's pid (not ebb's) holding
#     the weights plus its own context; ebb itself never touches the GPU;
#   - after the stage the worker is gone, the device holds nothing, and the
#     "[a] released N MiB of GPU memory" line matches the drop fakegpu-smi
#     measured across the release (before-release hook -> after-stage hook)
#     within 2 MiB;
#   - a pipeline mixing in-process and isolated stages runs, every stage
#     logs its lines, and nothing is left on the device after it;
#   - leak_mib in an isolated stage is reported (by the worker, the usual
#     leak lines) and freed by its exit.
set -u
: "${EBB:?}" "${EBB_WORKER:?}"
. "$(dirname "$0")/../lib/fakegpu.sh"
export FAKEGPU_CONTEXT_MIB=300 FAKEGPU_MEMORY_MIB=16384
used_total() { "$FAKEGPU_SMI" --query-gpu=memory.used --format=csv,noheader,nounits; }
echo "any input" > "$T/input.txt"

cat > "$T/cfg.json" <<'JSON'
{"pipelines": {
 "iso": {"stages": [{"stage": "synthetic", "name": "a", "isolate": true, "options":
    {"weights_mib": 1024, "activations_mib": 64, "cache_mib": 128, "run_ms": 1500,
     "touch": "sample"}}]},
 "mix": {"stages": [
    {"stage": "synthetic", "name": "in1", "options": {"weights_mib": 256, "touch": "sample"}},
    {"stage": "synthetic", "name": "iso", "isolate": true, "options":
      {"weights_mib": 512, "touch": "sample"}},
    {"stage": "synthetic", "name": "in2", "options": {"weights_mib": 128, "touch": "sample"}}]},
 "leak": {"stages": [{"stage": "synthetic", "name": "lk", "isolate": true, "options":
    {"weights_mib": 256, "leak_mib": 100, "touch": "sample"}}]}}}
JSON

# The hook: every compute app fakegpu-smi lists, "EVENT STAGE PID:MIB ...".
cat > "$T/hook.sh" <<'SH'
line="$EBB_HOOK_EVENT $EBB_HOOK_STAGE ebb=$EBB_HOOK_PID"
while IFS=', ' read -r pid mib; do [ -n "$pid" ] && line="$line $pid:$mib"; done < <(
  "$FAKEGPU_SMI" --query-compute-apps=pid,used_memory --format=csv,noheader,nounits)
echo "$line" >> "$HOOK_LOG"
SH
export HOOK_LOG="$T/hook.log"

# --- 1. one isolated stage -------------------------------------------------------
"$EBB" run --pipeline iso --config "$T/cfg.json" "$T/input.txt" -o "$T/out" --no-cache \
  > "$T/iso.log" 2>&1 &
ebb_pid=$!
seen=""
for _ in $(seq 1 100); do  # the worker shows up on the device while it runs
  seen=$(apps | awk -F', *' -v e="$ebb_pid" '$1 != e && $2 >= 1024 {print $1 " " $2}')
  if [ -n "$seen" ]; then  # whose child it is, while it still exists
    wppid=$(awk '{print $4}' "/proc/${seen%% *}/stat" 2>/dev/null)
    break
  fi
  sleep 0.05
done
during_apps=$(apps)
wait "$ebb_pid"
rc=$?
cat "$T/iso.log"
[ $rc -eq 0 ] || fail "isolated run exited $rc"
if [ -z "$seen" ]; then
  fail "fakegpu-smi never listed a worker holding >= 1024 MiB during the run"
else
  wpid=${seen%% *} wmib=${seen##* }
  echo "during the run: worker pid $wpid holds $wmib MiB (ebb pid $ebb_pid)"
  # weights + activations + cache + the worker's own context
  [ "$wmib" -ge $((1024 + 300)) ] || fail "worker holds $wmib MiB, expected >= 1324 (1 GiB + context)"
  echo "$during_apps" | grep -q "^$ebb_pid," && fail "ebb itself held GPU memory: $during_apps"
  kill -0 "$wpid" 2>/dev/null && fail "worker pid $wpid still exists after the job"
  [ "${wppid:-}" = "$ebb_pid" ] || fail "pid $wpid's parent is ${wppid:-?}, not ebb ($ebb_pid)"
fi
line=$(grep -o '^\[a\] released [0-9]* MiB of GPU memory' "$T/iso.log")
[ -n "$line" ] || fail "no '[a] released N MiB of GPU memory' line"
n=$(echo "$line" | awk '{print $3}')
[ -n "$(apps)" ] && fail "device not empty after the job: $(apps)"
[ "$(used_total)" -eq 0 ] || fail "device memory.used $(used_total) MiB after the job, expected 0"
grep -q '^\[a\] done in .* peak 1[0-9][0-9][0-9] MiB' "$T/iso.log" ||
  fail "the done line does not carry the worker's peak (>= 1000 MiB)"

# The release line against the drop measured around it (hook, from outside).
rm -f "$HOOK_LOG"
EBB_STAGE_HOOK="bash $T/hook.sh" "$EBB" run --pipeline iso --config "$T/cfg.json" \
  "$T/input.txt" -o "$T/out2" --no-cache > "$T/iso2.log" 2>&1 || fail "hooked run failed"
cat "$HOOK_LOG"
before=$(awk '$1 == "before-release" && $2 == "a" {s = 0; for (i = 4; i <= NF; i++) {split($i, f, ":"); s += f[2]} print s}' "$HOOK_LOG")
after=$(awk '$1 == "after-stage" && $2 == "a" {s = 0; for (i = 4; i <= NF; i++) {split($i, f, ":"); s += f[2]} print s}' "$HOOK_LOG")
n2=$(grep -o '^\[a\] released [0-9]* MiB' "$T/iso2.log" | awk '{print $3}')
echo "before-release ${before:-?} MiB, after-stage ${after:-?} MiB, released line ${n2:-?} MiB"
if [ -z "$before" ] || [ -z "$after" ] || [ -z "$n2" ]; then
  fail "missing hook figures or release line"
else
  drop=$((before - after))
  diff=$((n2 - drop)); diff=${diff#-}
  [ "$diff" -le 2 ] || fail "released $n2 MiB but fakegpu-smi dropped $drop MiB"
  [ "$after" -eq 0 ] || fail "after the isolated stage the device still holds $after MiB"
  [ "$drop" -ge $((1024 + 300)) ] || fail "drop $drop MiB: the worker's context was not included"
fi

# --- 2. isolated and in-process stages in one pipeline ------------------------------
"$EBB" run --pipeline mix --config "$T/cfg.json" "$T/input.txt" -o "$T/mix" --no-cache \
  > "$T/mix.log" 2>&1 || fail "mixed pipeline failed: $(cat "$T/mix.log")"
cat "$T/mix.log"
for s in in1 iso in2; do
  grep -q "^\[$s\] done in" "$T/mix.log" || fail "no done line for $s"
  grep -q "^\[$s\] released [0-9]* MiB of GPU memory" "$T/mix.log" || fail "no released line for $s"
  grep -q "\"name\": \"$s\"" "$T/mix/result.json" || fail "result.json lacks $s's item"
done
n_iso=$(grep -o '^\[iso\] released [0-9]*' "$T/mix.log" | awk '{print $3}')
[ "${n_iso:-0}" -ge $((512 + 300)) ] || fail "iso released ${n_iso:-?} MiB, expected >= 812 (weights + context)"
[ "$(used_total)" -eq 0 ] || fail "memory.used $(used_total) MiB after the mixed pipeline"

# --- 3. a leak in an isolated stage -------------------------------------------------------
"$EBB" run --pipeline leak --config "$T/cfg.json" "$T/input.txt" -o "$T/leak" --no-cache \
  > "$T/leak.log" 2>&1 || fail "leak pipeline failed: $(cat "$T/leak.log")"
cat "$T/leak.log"
grep -q '^\[lk\] leaked 100 MiB in 1 blocks; freed by ebb' "$T/leak.log" || fail "no leak line"
grep -q '^\[lk\]   100 MiB .* at .*synthetic.c:[0-9]*' "$T/leak.log" || fail "no leak site line"
n_lk=$(grep -o '^\[lk\] released [0-9]*' "$T/leak.log" | awk '{print $3}')
[ "${n_lk:-0}" -ge $((256 + 100 + 300)) ] || fail "lk released ${n_lk:-?} MiB, expected the leak included"
[ "$(used_total)" -eq 0 ] || fail "memory.used $(used_total) MiB after the leaking stage"
ls /dev/shm | grep -q "^ebb-w" && fail "shared memory left behind: $(ls /dev/shm | grep '^ebb-w')"

[ $fails -eq 0 ] && echo "worker_isolated: ok"
exit $((fails > 0))
