#!/usr/bin/env bash
# The seed's pipeline in Python (examples/torch/songtrace/): decode in ebb,
# then three PyTorch workers on the SDK (framework = "torch": a Demucs-shaped
# and a Whisper-shaped model, torchcrepe with its shipped weights), on the
# fake GPU.
#  1. `ebb run --release after-stage`: each stage's `[stage] released N MiB`
#     equals the drop fakegpu-smi (a process apart) saw across that release
#     (EBB_STAGE_HOOK at release-start / release-end), within 1 MiB.
#  2. `ebb serve`, policy sleep, 20 jobs in a row: every job succeeds, each
#     job after the first wakes its three workers from host memory (the
#     `awake: isolated, its worker ... restored` line, no new worker, no
#     load), and the device holds after the 20th job what it held after the
#     first (fakegpu-smi memory.used, within 1 MiB).
set -u
: "${EBB_BUILD_DIR:?}" "${EBB_SOURCE_DIR:?}" "${FAKEGPU_SMI:?}" "${EBB_LIBCUDA:?}"
EBB=$EBB_BUILD_DIR/ebb
. "$(dirname "$0")/../lib/server.sh" # common.sh and fakegpu.sh too
. "$(dirname "$0")/../lib/frameworks.sh"
export FAKEGPU_MEMORY_MIB=16384 FAKEGPU_CONTEXT_MIB=300
need_python "$TORCH_PY" torchcrepe
export EBB_TORCH_PYTHON=$TORCH_PY
export LD_LIBRARY_PATH="$(dirname "$EBB_LIBCUDA")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
EX=$EBB_SOURCE_DIR/examples/torch/songtrace
JOBS=${EBB_PIPELINE_JOBS:-20}
gpu_used() { "$FAKEGPU_SMI" --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }

# one second of a 220 Hz tone (decode reads WAV)
"$TORCH_PY" - "$T/tone.wav" <<'EOF'
import math, struct, sys, wave
with wave.open(sys.argv[1], "wb") as w:
    w.setnchannels(1); w.setsampwidth(2); w.setframerate(16000)
    w.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(2 * math.pi * 220 * i / 16000)))
                           for i in range(16000)))
EOF
# the example's config, with its paths, made lean: 2 decoder tokens
sed -e "s#\"./run_stage\"#\"$EX/run_stage\"#" \
    -e 's#"worker_args": \["transcribe"\]#"worker_args": ["transcribe"], "options": {"tokens": 2}#' \
    "$EX/songtrace_torch.json" > "$T/cfg.json"

# --- 1. after-stage: the release lines against fakegpu-smi --------------------
cat > "$T/hook.sh" <<EOF
#!/bin/sh
echo "\$EBB_HOOK_EVENT \$EBB_HOOK_STAGE \$($FAKEGPU_SMI --query-gpu=memory.used --format=csv,noheader,nounits | head -1)" >> "$T/hook.log"
EOF
EBB_STAGE_HOOK="sh $T/hook.sh" timeout 1200 "$EBB" run --config "$T/cfg.json" --pipeline songtrace_torch \
  --device cuda:0 --release after-stage "$T/tone.wav" -o "$T/out1" > "$T/run.log" 2>&1
rc=$?
grep -v '^fakegpu' "$T/run.log" | sed 's/^/run: /'
[ $rc -eq 0 ] || fail "ebb run exited $rc"
for stage in separate transcribe pitch; do
  n=$(sed -n "s/^\[$stage\] released \([0-9]*\) MiB of GPU memory.*/\1/p" "$T/run.log" | head -1)
  start=$(awk -v s="$stage" '$1 == "release-start" && $2 == s {print $3; exit}' "$T/hook.log")
  end=$(awk -v s="$stage" '$1 == "release-end" && $2 == s {print $3; exit}' "$T/hook.log")
  if [ -z "$n" ] || [ -z "$start" ] || [ -z "$end" ]; then
    fail "$stage: released '$n' MiB, fakegpu-smi at release-start '$start', release-end '$end'"
    continue
  fi
  drop=$((start - end))
  echo "$stage: [$stage] released $n MiB; fakegpu-smi $start -> $end MiB (-$drop)"
  [ "$n" -gt 300 ] || fail "$stage: released $n MiB, less than its worker's context"
  d=$((n - drop)); [ ${d#-} -le 1 ] || fail "$stage: ebb says $n MiB, fakegpu-smi saw $drop MiB go"
done
[ -s "$T/out1/pitch.json" ] || [ -n "$(ls "$T/out1" 2>/dev/null)" ] || fail "ebb run wrote nothing to $T/out1"

# --- 2. ebb serve, policy sleep: 20 jobs ---------------------------------------
serve "$T/serve.log" --config "$T/cfg.json" --data-dir "$T/data" --input-dir "$T"
first=
for i in $(seq "$JOBS"); do
  req POST /v1/jobs -d "{\"pipeline\": \"songtrace_torch\", \"input\": \"$T/tone.wav\"}"
  id=$(jget "$BODY" '["id"]')
  [ "$CODE" = 202 ] && [ -n "$id" ] || { fail "job $i: POST answered $CODE $BODY"; break; }
  wait_done "$id" 12000 || break
  [ "$STATE" = succeeded ] || { fail "job $i: $STATE: $BODY"; break; }
  # the job's end puts the pipeline to sleep: wait for the third stage's line
  wait_log "$T/serve.log" "asleep: isolated.*keeps" 600
  for _ in $(seq 600); do
    [ "$(grep -c '\] asleep: isolated, its worker' "$T/serve.log")" -ge $((3 * i)) ] && break
    sleep 0.1
  done
  used=$(gpu_used)
  [ -n "$first" ] || first=$used
  echo "job $i: succeeded; fakegpu-smi memory.used $used MiB (after job 1: $first)"
done
stop_server
grep -v '^fakegpu' "$T/serve.log" | grep -E 'asleep|awake|released|leaked|error' | head -20 | sed 's/^/serve: /'
woken=$(grep -c '\] awake: isolated, its worker (pid [0-9]*) restored' "$T/serve.log")
reloaded=$(grep -c 'awake: isolated, loaded again in a new worker' "$T/serve.log")
echo "wakes from host memory: $woken; wakes by a new worker: $reloaded"
[ "$woken" -eq $((3 * (JOBS - 1))) ] || fail "$woken wakes from host memory, want $((3 * (JOBS - 1))) (3 stages x $((JOBS - 1)) jobs)"
[ "$reloaded" -eq 0 ] || fail "$reloaded wakes loaded a new worker"
d=$((used - first)); [ ${d#-} -le 1 ] || fail "after job $JOBS the device holds $used MiB, after job 1 $first MiB"
[ $fails -eq 0 ] && echo "python_torch_pipeline: ok"
exit $((fails > 0))
