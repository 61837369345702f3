#!/usr/bin/env bash
# ASK BEFORE FAILING A WAKE (issue 35): one fake 6 GiB device. X holds "sl"
# (1 GiB, release sleep) and puts it to sleep (its weights go to host memory,
# its context back to the driver); A holds an idle 1 GiB pipeline; a foreign
# filler leaves 512 MiB free. A wake of sl needs ~1.3 GiB: X asks its peers
# first, A unloads, the wake succeeds (it would fail with out-of-memory and
# stay asleep otherwise). Then the same through a job: sl asleep again, A's
# pipeline reloaded, a job of sl wakes it after asking A.
set -u
: "${EBB_BUILD_DIR:?}" "${EBB:?}"
. "$(dirname "$0")/../lib/broker.sh"
export FAKEGPU_MEMORY_MIB=6144 FAKEGPU_CONTEXT_MIB=300
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {
  "idle": {"stages": [{"stage": "synthetic", "name": "i", "cache": false,
                     "options": {"weights_mib": 1024, "touch": "sample"}}]},
  "sl": {"release": "sleep", "stages": [{"stage": "synthetic", "name": "s", "cache": false,
                     "options": {"weights_mib": 1024, "touch": "sample"}}]}}}
JSON
echo "any input" > "$T/input.txt"
start() { broker_serve "$1" "$T/cfg.json" --input-dir "$T" --broker-timeout 30; }

start X
start A
c=$(post "$URL_X/v1/pipelines/sl/load"); [ "$c" = 200 ] || fail "load sl: $c $(cat "$T/post.out")"
c=$(post "$URL_X/v1/pipelines/sl/sleep"); [ "$c" = 200 ] || fail "sleep sl: $c $(cat "$T/post.out")"
c=$(post "$URL_A/v1/pipelines/idle/load"); [ "$c" = 200 ] || fail "load idle on A: $c"
leave_free 512
echo "--- X holds $(held_by "$PID_X") MiB (sl asleep), A $(held_by "$PID_A") MiB; free $(free_mib) MiB"

# --- 1. POST /v1/pipelines/sl/wake asks A before it fails
a0=$(held_by "$PID_A")
c=$(post "$URL_X/v1/pipelines/sl/wake")
[ "$c" = 200 ] || fail "wake with A's 3 GiB to be had: $c $(cat "$T/post.out")"
grep -q "^\[pipeline sl\] wakes into about [0-9]* MiB, [0-9]* MiB free: asking the other processes on cuda:0" "$T/logX" ||
  fail "X did not say it asks before the wake: $(grep -v '^ebb:' "$T/logX")"
own=$(sed -n "s/^\[broker\] pid $PID_A (ebb serve) gave back \([0-9]*\) MiB on cuda:0 in [0-9]* ms: pipeline idle unloaded.*/\1/p" "$T/logA" | head -1)
seen=$(sed -n "s/^\[broker\] pid $PID_A (ebb serve) gave back \([0-9]*\) MiB on cuda:0 in .*/\1/p" "$T/logX" | head -1)
[ -n "$own" ] || fail "A logged no giving: $(cat "$T/logA")"
[ "$seen" = "$own" ] || fail "X logged '$seen' MiB for A, A logged '$own'"
drop=$(( a0 - $(held_by "$PID_A") )); d=$(( drop - ${own:-0} )); d=${d#-}
[ "$d" -le 1 ] || fail "A logged $own MiB, fakegpu-smi shows a drop of $drop MiB"
[ "$(held_by "$PID_X")" -ge 1024 ] || fail "X woke sl but holds $(held_by "$PID_X") MiB"
echo "--- wake: A gave $own MiB; X now holds $(held_by "$PID_X") MiB"

# --- 2. a job of the sleeping pipeline asks before it wakes it
c=$(post "$URL_X/v1/pipelines/sl/sleep"); [ "$c" = 200 ] || fail "sleep sl again: $c $(cat "$T/post.out")"
kill -KILL "$FILLER"; wait "$FILLER" 2>/dev/null
c=$(post "$URL_A/v1/pipelines/idle/load"); [ "$c" = 200 ] || fail "reload idle on A: $c"
leave_free 512
c=$(post "$URL_X/v1/jobs" -H 'Content-Type: application/json' -d "{\"pipeline\": \"sl\", \"input\": \"$T/input.txt\"}")
[ "$c" = 202 ] || fail "job of sl: $c $(cat "$T/post.out")"
id=$(jget "$(cat "$T/post.out")" '["id"]')
for _ in $(seq 300); do
  st=$(jget "$(curl -s "$URL_X/v1/jobs/$id")" '["state"]')
  case $st in succeeded|failed|cancelled) break ;; esac; sleep 0.1
done
[ "$st" = succeeded ] || fail "the job waking sl ended '$st': $(curl -s "$URL_X/v1/jobs/$id")"
[ "$(grep -c "^\[broker\] pid $PID_A (ebb serve) gave back" "$T/logA")" = 2 ] ||
  fail "A did not give for the job's wake: $(grep broker "$T/logA")"
grep -qi "out of memory\|out_of_memory" "$T/logA" "$T/logX" && fail "an out-of-memory was logged"

kill -TERM "$PID_X" "$PID_A"; wait "$PID_X" "$PID_A" || fail "a server exited $? on SIGTERM"
[ $fails -eq 0 ] && echo "broker_ask_on_wake: ok"
exit $((fails > 0))
