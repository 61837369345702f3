#!/usr/bin/env bash
# The read side never waits on the device: while a stage runs for 3 s (a
# job) and while a pipeline loads, /metrics, /v1/memory and /v1/pipelines
# each answer within 100 ms, and what they show is current once the work is
# done (a loaded pipeline's owner bytes; reserved back to 0 after unload).
set -u
. "$(dirname "$0")/../lib/server.sh"
export FAKEGPU_MEMORY_MIB=8192 FAKEGPU_CONTEXT_MIB=300
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {
  "sleepy": {"stages": [{"stage": "synthetic", "name": "z", "options": {"weights_mib": 64, "run_ms": 3000}}]},
  "big": {"stages": [{"stage": "synthetic", "name": "b", "options": {"weights_mib": 3072, "activations_mib": 0}}]}}}
JSON
echo "x" > "$T/input.txt"
serve "$T/log" --config "$T/cfg.json" --data-dir "$T/data" --no-cache --input-dir "$T"
LIMIT=$((100 * ${EBB_TEST_SLOWDOWN:-1})) # ms (sanitizer builds: x4)
# worst PATH: the slowest of 5 GETs of PATH, in ms
worst() {
  local w=0 t
  for _ in 1 2 3 4 5; do
    t=$(curl -s -o /dev/null -m 10 -w '%{time_total}' "$URL$1")
    w=$(python3 -c "print(max($w, round($t * 1000)))")
  done
  echo "$w"
}
code=$(curl -s -o "$T/job" -w '%{http_code}' -H 'Content-Type: application/json' \
  -d "{\"pipeline\": \"sleepy\", \"input\": \"$T/input.txt\"}" "$URL/v1/jobs")
[ "$code" = 202 ] || fail "job: $code $(cat "$T/job")"
for _ in $(seq 50); do grep -q 'job .*: running' "$T/log" && break; sleep 0.1; done
sleep 0.5
for p in /metrics /v1/memory /v1/pipelines; do
  w=$(worst "$p")
  echo "while a stage runs: GET $p worst ${w} ms"
  [ "$w" -le "$LIMIT" ] || fail "GET $p took ${w} ms while a stage ran (limit $LIMIT)"
done
# while a pipeline loads (3 GiB touched)
curl -s -o "$T/load" -X POST "$URL/v1/pipelines/big/load" &
LOAD=$!
sleep 0.2
for p in /metrics /v1/memory; do
  w=$(worst "$p")
  echo "while a pipeline loads: GET $p worst ${w} ms"
  [ "$w" -le "$LIMIT" ] || fail "GET $p took ${w} ms while a pipeline loaded (limit $LIMIT)"
done
wait $LOAD
grep -q '"loaded":true' "$T/load" || fail "load big: $(cat "$T/load")"
# one device answers as several do: the device the pipeline was placed on
grep -q '"device":"cuda:0"' "$T/load" || fail "load big on one device names no device: $(cat "$T/load")"
m=$(curl -s "$URL/metrics")
case $m in *'ebb_owner_bytes{owner="b",device="cuda:0"} 3221225472'*) ;; *) fail "/metrics right after the load does not show b's 3 GiB" ;; esac
curl -s -o /dev/null -X POST "$URL/v1/pipelines/big/unload"
r=$(curl -s "$URL/v1/memory" | python3 -c 'import json,sys; print(json.load(sys.stdin)["allocator"]["reserved_bytes"])')
[ "$r" = 0 ] || fail "/v1/memory right after the unload: reserved $r"
stop_server
if [ "$fails" -ne 0 ]; then echo "--- server log"; tail -30 "$T/log"; exit 1; fi
echo "server_readside: all checks passed"
