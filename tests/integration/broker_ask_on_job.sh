#!/usr/bin/env bash
# ASK BEFORE FAILING (issue 35): three `ebb serve` on one fake 16 GiB device:
# A holds an idle 3 GiB pipeline, B an idle 4 GiB one; X gets a job of an
# 11.5 GiB pipeline, more than the driver has free. X asks its peers, most
# idle first: A unloads, still not enough, B unloads; X's job succeeds with
# no out-of-memory anywhere, and fakegpu-smi shows each peer's drop equal to
# what it logged (within 1 MiB) and to what X logged for it. Then, on 8 GiB,
# with A's pipeline "evictable": false, X's 5 GiB job fails with the clear
# out-of-memory error, X logs why A keeps it, and A keeps it.
set -u
: "${EBB_BUILD_DIR:?}" "${EBB:?}"
. "$(dirname "$0")/../lib/broker.sh"
export FAKEGPU_MEMORY_MIB=16384 FAKEGPU_CONTEXT_MIB=300
mkcfg() { # FILE EVICTABLE BIG-MIB
  cat > "$1" <<JSON
{"pipelines": {
  "idle": {"evictable": $2, "stages": [{"stage": "synthetic", "name": "i", "cache": false,
                     "options": {"weights_mib": 3072, "touch": "sample"}}]},
  "idle2": {"stages": [{"stage": "synthetic", "name": "i2", "cache": false,
                     "options": {"weights_mib": 4096, "touch": "sample"}}]},
  "big": {"stages": [{"stage": "synthetic", "name": "b", "cache": false,
                     "options": {"weights_mib": $3, "touch": "sample"}}]}}}
JSON
}
echo "any input" > "$T/input.txt"
start() { broker_serve "$1" "$2" --input-dir "$T" --broker-timeout 60; } # NAME CONFIG
job() { # URL -> final state in ST, job JSON in JB
  local id
  id=$(curl -s -X POST "$1/v1/jobs" -H 'Content-Type: application/json' \
    -d "{\"pipeline\": \"big\", \"input\": \"$T/input.txt\"}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  for _ in $(seq 900); do
    JB=$(curl -s "$1/v1/jobs/$id"); ST=$(jget "$JB" '["state"]')
    case $ST in succeeded|failed|cancelled) return ;; esac; sleep 0.1
  done
}

load() { # URL PIPELINE
  local c
  c=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$1/v1/pipelines/$2/load")
  [ "$c" = 200 ] || fail "load $2: $c"
}
# logged NAME-LOG PID: the MiB of PID's "[broker] pid PID ... gave back N MiB" line in the log
logged() { sed -n "s/^\[broker\] pid $2 (ebb serve) gave back \([0-9]*\) MiB on cuda:0 in .*/\1/p" "$1" | head -1; }

# --- evictable: X asks, A then B unload, the job succeeds
mkcfg "$T/cfg1.json" true 11776
start A1 "$T/cfg1.json"; A=$PID; load "$URL" idle
sleep 0.3 # A is the most idle
start B1 "$T/cfg1.json"; B=$PID; load "$URL" idle2
start X1 "$T/cfg1.json"; X=$PID; UX=$URL
a0=$(held_by "$A") b0=$(held_by "$B")
# The broker's facts on /v1/events (issue 35): X's and A's streams, read while the job runs
curl -sN --max-time 20 "$UX/v1/events" > "$T/evX" 2>/dev/null & EVX=$!
curl -sN --max-time 20 "$(sed -n 's/^ebb: listening on //p' "$T/logA1" | head -1)/v1/events" > "$T/evA" 2>/dev/null & EVA=$!
sleep 0.5
job "$UX"
[ "$ST" = succeeded ] || fail "X's job ended '$ST' though A and B could give: $JB $(cat "$T/logX1")"
for peer in A B; do
  eval "p=\$$peer"
  eval "h0=\$${peer,,}0"
  own=$(logged "$T/log${peer}1" "$p") seen=$(logged "$T/logX1" "$p")
  drop=$(( h0 - $(held_by "$p") ))
  [ -n "$own" ] || { fail "$peer logged no giving: $(cat "$T/log${peer}1")"; continue; }
  d=$(( drop - own )); d=${d#-}
  [ "$d" -le 1 ] || fail "$peer logged $own MiB, fakegpu-smi shows a drop of $drop MiB"
  [ "$seen" = "$own" ] || fail "X logged '$seen' MiB for $peer, $peer logged $own"
  echo "--- $peer gave $own MiB (fakegpu-smi: $h0 -> $(held_by "$p") MiB)"
done
sleep 1; kill "$EVX" "$EVA" 2>/dev/null; wait "$EVX" "$EVA" 2>/dev/null
# broker_ev FILE STATE: the `broker` events of that state in a stream, one JSON a line
broker_ev() { python3 - "$1" "$2" <<'PY'
import json, sys
ev = None
for line in open(sys.argv[1]):
    line = line.rstrip("\n")
    if line.startswith("event: "): ev = line[7:]
    elif line.startswith("data: ") and ev == "broker":
        o = json.loads(line[6:])
        if o.get("state") == sys.argv[2]: print(json.dumps(o))
PY
}
asked=$(broker_ev "$T/evX" asked | head -1)
[ -n "$asked" ] && [ "$(jget "$asked" '["satisfied"]')" = True ] ||
  fail "X's /v1/events has no satisfied 'asked' broker event: $(grep -c . "$T/evX") lines: $asked"
recv_a=$(broker_ev "$T/evX" received | python3 -c "import json,sys; print(sum(json.loads(l)['bytes'] for l in sys.stdin if json.loads(l)['pid'] == $A) >> 20)")
gave_a=$(broker_ev "$T/evA" gave | python3 -c "import json,sys; print(sum(json.loads(l)['bytes'] for l in sys.stdin) >> 20)")
[ "$recv_a" = "$(logged "$T/logA1" "$A")" ] && [ "$gave_a" = "$recv_a" ] ||
  fail "broker events: X received $recv_a MiB from A, A's stream says it gave $gave_a, A logged $(logged "$T/logA1" "$A")"
echo "--- /v1/events: X asked ($asked), received $recv_a MiB from A; A's stream: gave $gave_a MiB"
grep -q "pipeline idle unloaded" "$T/logA1" && grep -q "pipeline idle2 unloaded" "$T/logB1" ||
  fail "A and B did not unload their idle pipelines"
grep -qi "out of memory\|out_of_memory" "$T/logA1" "$T/logB1" "$T/logX1" && fail "an out-of-memory was logged"
kill -TERM "$A" "$B" "$X"; wait "$A" "$B" "$X"; PIDS=()

run_case() { # NAME EVICTABLE (8 GiB, a 5 GiB job, A alone)
  mkcfg "$T/cfg$1.json" "$2" 5120
  start "A$1" "$T/cfg$1.json"; A=$PID; load "$URL" idle
  start "X$1" "$T/cfg$1.json"; X=$PID; UX=$URL
  job "$UX"
}

# --- not evictable: X's job fails with the clear out-of-memory, A keeps it
rm -f "$FAKEGPU_STATE"
export FAKEGPU_MEMORY_MIB=8192
run_case 2 false
[ "$ST" = failed ] || fail "X's job ended '$ST' though A may not give: $JB"
grep -q "^\[broker\] pid $A keeps pipeline idle (3372 MiB): \"evictable\": false in its config" "$T/logX2" ||
  fail "X does not log why A keeps its pipeline: $(grep broker "$T/logX2")"
[ "$(held_by "$A")" -ge 3372 ] || fail "A gave its non-evictable pipeline away: $(held_by "$A") MiB left"
kill -TERM "$A" "$X"; wait "$A" "$X"; PIDS=()
[ $fails -eq 0 ] && echo "broker_ask_on_job: ok"
exit $((fails > 0))
