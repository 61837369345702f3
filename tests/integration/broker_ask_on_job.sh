#!/usr/bin/env bash
# ASK BEFORE FAILING (issue 35): on one fake 8 GiB device, server A holds an
# idle 3 GiB pipeline; server X gets a job of a 5 GiB pipeline, more than the
# driver has free. X asks A through the broker, A unloads (its [broker] line
# says so), and X's job succeeds with no out-of-memory anywhere. With A's
# pipeline "evictable": false instead, X's job fails with the clear
# out-of-memory error, and A keeps its pipeline.
set -u
: "${EBB_BUILD_DIR:?}" "${EBB:?}"
. "$(dirname "$0")/../lib/fakegpu.sh"
export FAKEGPU_MEMORY_MIB=8192 FAKEGPU_CONTEXT_MIB=300
BD=$T/broker
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -KILL "$p"; done 2>/dev/null; wait 2>/dev/null' EXIT
mkcfg() { # FILE EVICTABLE
  cat > "$1" <<JSON
{"pipelines": {
  "idle": {"evictable": $2, "stages": [{"stage": "synthetic", "name": "i", "cache": false,
                     "options": {"weights_mib": 3072, "touch": "sample"}}]},
  "big": {"stages": [{"stage": "synthetic", "name": "b", "cache": false,
                     "options": {"weights_mib": 5120, "touch": "sample"}}]}}}
JSON
}
echo "any input" > "$T/input.txt"
start() { # NAME CONFIG: sets PID and URL
  "$EBB" serve --listen 127.0.0.1:0 --config "$2" --data-dir "$T/data$1" --no-cache \
    --input-dir "$T" --broker-dir "$BD" --broker-timeout 60 > "$T/log$1" 2>&1 &
  PID=$!
  PIDS+=($PID)
  URL=
  for _ in $(seq 100); do URL=$(head -1 "$T/log$1" 2>/dev/null | sed -n 's/^ebb: listening on //p'); [ -n "$URL" ] && break; sleep 0.1; done
  [ -n "$URL" ] || { echo "FAIL: server $1 did not listen:"; cat "$T/log$1"; exit 1; }
  for _ in $(seq 50); do [ -S "$BD/$PID.sock" ] && return 0; sleep 0.1; done
  echo "FAIL: server $1 did not register"; exit 1
}
job() { # URL -> final state in ST, job JSON in JB
  local id
  id=$(curl -s -X POST "$1/v1/jobs" -H 'Content-Type: application/json' \
    -d "{\"pipeline\": \"big\", \"input\": \"$T/input.txt\"}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  for _ in $(seq 900); do
    JB=$(curl -s "$1/v1/jobs/$id"); ST=$(jget "$JB" '["state"]')
    case $ST in succeeded|failed|cancelled) return ;; esac; sleep 0.1
  done
}

run_case() { # NAME EVICTABLE
  mkcfg "$T/cfg$1.json" "$2"
  start "A$1" "$T/cfg$1.json"; A=$PID; UA=$URL
  c=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$UA/v1/pipelines/idle/load")
  [ "$c" = 200 ] || fail "load idle on A: $c"
  start "X$1" "$T/cfg$1.json"; X=$PID; UX=$URL
  job "$UX"
}

# --- evictable: X asks, A unloads, the job succeeds
run_case 1 true
[ "$ST" = succeeded ] || fail "X's job ended '$ST' though A could give: $JB $(cat "$T/logX1")"
grep -q "^\[broker\] pid $A (ebb serve) gave back 3372 MiB on cuda:0 in [0-9]* ms: pipeline idle unloaded" "$T/logX1" ||
  fail "X does not log what A gave: $(grep broker "$T/logX1")"
grep -q "^\[broker\] pid $A (ebb serve) gave back 3372 MiB on cuda:0" "$T/logA1" ||
  fail "A does not log its giving: $(cat "$T/logA1")"
grep -qi "out of memory\|out_of_memory" "$T/logA1" "$T/logX1" && fail "an out-of-memory was logged"
kill -TERM "$A" "$X"; wait "$A" "$X"; PIDS=()

# --- not evictable: X's job fails with the clear out-of-memory, A keeps it
rm -f "$FAKEGPU_STATE"
run_case 2 false
[ "$ST" = failed ] || fail "X's job ended '$ST' though A may not give: $JB"
grep -q "^\[broker\] pid $A keeps pipeline idle (3372 MiB): \"evictable\": false in its config" "$T/logX2" ||
  fail "X does not log why A keeps its pipeline: $(grep broker "$T/logX2")"
[ "$(held_by "$A")" -ge 3372 ] || fail "A gave its non-evictable pipeline away: $(held_by "$A") MiB left"
kill -TERM "$A" "$X"; wait "$A" "$X"; PIDS=()
[ $fails -eq 0 ] && echo "broker_ask_on_job: ok"
exit $((fails > 0))
