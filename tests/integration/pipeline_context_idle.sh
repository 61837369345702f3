#!/usr/bin/env bash
# An idle ebb holds 0 bytes, context included, even in the middle of a job:
# when the next stage does not use the GPU (transcribe waiting minutes on a
# Whisper server), the stage before it hands the device context back too, and
# its release line counts it. Measured from outside with fakegpu-smi through
# the EBB_STAGE_HOOK command.
set -u
: "${EBB:?}"
. "$(dirname "$0")/../lib/fakegpu.sh"
unset EBB_WHISPER_URL
export FAKEGPU_CONTEXT_MIB=300 FAKEGPU_MEMORY_MIB=8192

cat > "$T/cfg.json" <<'JSON'
{"pipelines": {"p": {"stages": [
  {"stage": "synthetic", "name": "a", "cache": false, "options": {"weights_mib": 512, "activations_mib": 0, "cache_mib": 0, "touch": "sample"}},
  {"stage": "transcribe", "name": "wait", "cache": false},
  {"stage": "synthetic", "name": "b", "cache": false, "options": {"weights_mib": 256, "activations_mib": 0, "cache_mib": 0, "touch": "sample"}},
  {"stage": "synthetic", "name": "c", "cache": false, "options": {"weights_mib": 128, "touch": "sample"}}]}}}
JSON
echo "any input" > "$T/input.txt"
export HOOK_LOG="$T/hook.log" EBB_STAGE_HOOK="sh $SMI_HOOK"

"$EBB" run --pipeline p --config "$T/cfg.json" --device cuda --no-cache -o "$T/out" \
  "$T/input.txt" > "$T/stdout" 2> "$T/stderr"
rc=$?
cat "$T/stdout" "$T/hook.log"
[ "$rc" = 0 ] || fail "ebb run exited $rc: $(cat "$T/stderr")"
used_at() { awk -v e="$1" -v s="$2" '$1 == e && $2 == s {print $4}' "$HOOK_LOG"; }

# a is followed by a stage that does not use the GPU: context goes back with a
[ "$(used_at after-stage a)" = 0 ] || fail "after a (next: transcribe) the process holds $(used_at after-stage a) MiB, expected 0"
[ "$(used_at after-stage wait)" = 0 ] || fail "during/after transcribe the process holds $(used_at after-stage wait) MiB, expected 0"
# a's line counts its weights and the context: 512 + 300
grep -qx '\[a\] released 812 MiB of GPU memory' "$T/stdout" ||
  fail "expected '[a] released 812 MiB of GPU memory' (512 MiB weights + 300 MiB context)"
# b is followed by a GPU stage: the context stays (recreating it costs time)
[ "$(used_at after-stage b)" = 300 ] || fail "after b (next: c, a GPU stage) expected the 300 MiB context, got $(used_at after-stage b)"
grep -qx '\[b\] released 256 MiB of GPU memory' "$T/stdout" || fail "expected '[b] released 256 MiB of GPU memory'"
[ "$(used_at after-job p)" = 0 ] || fail "after the job the process holds $(used_at after-job p) MiB"

[ "$fails" = 0 ] && echo "pipeline_context_idle: ok" || exit 1
