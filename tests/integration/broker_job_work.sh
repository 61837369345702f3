#!/usr/bin/env bash
# A JOB CLAIMS ITS WORKING MEMORY (broker_soak's out-of-memory): one fake
# 4 GiB device. X holds "w" loaded and awake (256 MiB of weights, 128 MiB
# of activations allocated during each run); A holds an idle 1 GiB
# pipeline; a foreign filler leaves 32 MiB free. A job of w allocates its
# activations during the run: X asks its peers for them first (A unloads)
# and the job succeeds; it failed with out-of-memory before, as two jobs of
# broker_soak did. Twice: the first job's working memory is what the stage
# declares over what the load measured, the second's what the first run
# measured.
set -u
: "${EBB_BUILD_DIR:?}" "${EBB:?}"
. "$(dirname "$0")/../lib/broker.sh"
export FAKEGPU_MEMORY_MIB=4096 FAKEGPU_CONTEXT_MIB=300
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {
  "idle": {"stages": [{"stage": "synthetic", "name": "i", "cache": false,
                     "options": {"weights_mib": 1024, "touch": "sample"}}]},
  "w": {"release": "sleep", "stages": [{"stage": "synthetic", "name": "s", "cache": false,
                     "options": {"weights_mib": 256, "activations_mib": 128, "run_ms": 50,
                                 "touch": "sample"}}]}}}
JSON
echo "any input" > "$T/input.txt"
start() { broker_serve "$1" "$T/cfg.json" --input-dir "$T" --broker-timeout 30; }

start X
start A
c=$(post "$URL_X/v1/pipelines/w/load"); [ "$c" = 200 ] || fail "load w on X: $c $(cat "$T/post.out")"
for round in 1 2; do
  c=$(post "$URL_A/v1/pipelines/idle/load"); [ "$c" = 200 ] || fail "load idle on A: $c"
  leave_free 32
  echo "--- round $round: X holds $(held_by "$PID_X") MiB (w loaded), A $(held_by "$PID_A") MiB; free $(free_mib) MiB"
  c=$(post "$URL_X/v1/jobs" -H 'Content-Type: application/json' -d "{\"pipeline\": \"w\", \"input\": \"$T/input.txt\"}")
  [ "$c" = 202 ] || fail "job of w: $c $(cat "$T/post.out")"
  id=$(jget "$(cat "$T/post.out")" '["id"]')
  for _ in $(seq 300); do
    st=$(jget "$(curl -s "$URL_X/v1/jobs/$id")" '["state"]')
    case $st in succeeded|failed|cancelled) break ;; esac; sleep 0.1
  done
  [ "$st" = succeeded ] ||
    fail "round $round: the job of the loaded w with 32 MiB free ended '$st': $(curl -s "$URL_X/v1/jobs/$id")"
  [ "$(grep -c "^\[broker\] pid $PID_A (ebb serve) gave back [1-9]" "$T/logA")" = "$round" ] ||
    fail "round $round: A did not give for the job's working memory: $(grep broker "$T/logA")"
  kill -KILL "$FILLER"; wait "$FILLER" 2>/dev/null
done
grep -qi "out of memory\|out_of_memory" "$T/logA" "$T/logX" && fail "an out-of-memory was logged: $(grep -i 'out of' "$T/logX")"

kill -TERM "$PID_X" "$PID_A"; wait "$PID_X" "$PID_A" || fail "a server exited $? on SIGTERM"
[ $fails -eq 0 ] && echo "broker_job_work: ok"
exit $((fails > 0))
