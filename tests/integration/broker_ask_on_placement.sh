#!/usr/bin/env bash
# ASK BEFORE FAILING A PLACEMENT (issue 35): two fake 4 GiB devices. A
# foreign filler holds 3 GiB of cuda:0; a peer `ebb serve --devices cuda:1`
# holds an idle 2 GiB pipeline on cuda:1. X (`ebb serve --devices all`) is
# asked to load "big" (2 GiB + its context): it fits on no device as the
# driver sees them, so X asks the other processes on each eligible device
# (most free first) before it fails: the peer on cuda:1 unloads, and big is
# placed and loaded there. Without asking the load answered 503 "fits
# nowhere".
# Then the same for a job: big unloaded, P loads its pipeline again, and a
# job of big is sent to X. It fits nowhere while no device of X runs a job,
# so X asks at once instead of waiting out --max-wait (120 s here): the job
# succeeds within 20 s on cuda:1, and P logs a second giving.
set -u
: "${EBB_BUILD_DIR:?}" "${EBB:?}"
. "$(dirname "$0")/../lib/broker.sh"
export FAKEGPU_DEVICES=2 FAKEGPU_MEMORY_MIB=4096,4096 FAKEGPU_CONTEXT_MIB=300
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {
  "idle": {"stages": [{"stage": "synthetic", "name": "i", "cache": false,
                     "options": {"weights_mib": 2048, "touch": "sample"}}]},
  "big": {"expected_mib": 2348, "stages": [{"stage": "synthetic", "name": "b", "cache": false,
                     "options": {"weights_mib": 2048, "touch": "sample"}}]}}}
JSON
echo "any input" > "$T/input.txt"
start() { broker_serve "$1" "$T/cfg.json" --devices "$2" --broker-timeout 30 --input-dir "$T" \
  --max-wait 120; } # NAME DEVICES
free_on() { "$FAKEGPU_SMI" --id="$1" --query-gpu=memory.free --format=csv,noheader,nounits | head -1; }

"$HOLD" --device 0 --alloc 3072 --wait < /dev/null > /dev/null &
PIDS+=($!)
start P cuda:1
c=$(post "$URL_P/v1/pipelines/idle/load"); [ "$c" = 200 ] || fail "load idle on P: $c $(cat "$T/post.out")"
start X all
for _ in $(seq 50); do [ "$(free_on 0)" -le 800 ] && break; sleep 0.1; done
echo "--- free: cuda:0 $(free_on 0) MiB, cuda:1 $(free_on 1) MiB; big needs ~2348 MiB"
c=$(post "$URL_X/v1/pipelines/big/load")
cat "$T/post.out"; echo
[ "$c" = 200 ] || fail "loading big with P's 2 GiB to be had on cuda:1: $c $(cat "$T/post.out")"
grep -q "^\[broker\] pid $PID_P (ebb serve) gave back [0-9]* MiB on cuda:1 .*pipeline idle unloaded" "$T/logP" ||
  fail "P did not give its pipeline: $(grep broker "$T/logP")"
grep -q "^\[pipeline big\] needs about [0-9]* MiB, [0-9]* MiB free: asking the other processes on cuda:1" "$T/logX" ||
  fail "X did not say it asks on cuda:1: $(grep -v '^ebb:' "$T/logX" | head -20)"
dev=$(curl -s "$URL_X/v1/pipelines" | python3 -c 'import json,sys; b=json.load(sys.stdin); ps=b.get("pipelines", b); print([p.get("device", p.get("devices")) for p in ps if p["name"]=="big"])')
echo "--- big placed: $dev; cuda:1 free $(free_on 1) MiB"
[ "$(free_on 1)" -le 1800 ] || fail "big is not on cuda:1: $(free_on 1) MiB free there"

echo "--- a job of big while it fits nowhere"
c=$(post "$URL_X/v1/pipelines/big/unload"); [ "$c" = 200 ] || fail "unload big on X: $c $(cat "$T/post.out")"
c=$(post "$URL_P/v1/pipelines/idle/load"); [ "$c" = 200 ] || fail "load idle on P again: $c $(cat "$T/post.out")"
echo "--- free: cuda:0 $(free_on 0) MiB, cuda:1 $(free_on 1) MiB"
t0=$(date +%s.%N)
id=$(curl -s -X POST "$URL_X/v1/jobs" -H 'Content-Type: application/json' \
  -d "{\"pipeline\": \"big\", \"input\": \"$T/input.txt\"}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
st=
for _ in $(seq 300); do
  st=$(curl -s "$URL_X/v1/jobs/$id" | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
  case $st in succeeded|failed|cancelled) break ;; esac
  sleep 0.1
done
secs=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
echo "--- the job ended $st after $secs s (--max-wait 120)"
[ "$st" = succeeded ] || fail "the job of big ended '$st' after $secs s: $(curl -s "$URL_X/v1/jobs/$id")"
gave=$(grep -c "^\[broker\] pid $PID_P (ebb serve) gave back [0-9]* MiB on cuda:1 .*pipeline idle unloaded" "$T/logP")
[ "$gave" -ge 2 ] || fail "P gave $gave times; the job did not ask it: $(grep broker "$T/logP")"
grep -qi "out of memory\|out_of_memory" "$T/logX" "$T/logP" && fail "an out-of-memory was logged"
kill -TERM "$PID_X" "$PID_P"; wait "$PID_X" "$PID_P" || fail "a server exited $? on SIGTERM"
[ $fails -eq 0 ] && echo "broker_ask_on_placement: ok"
exit $((fails > 0))
