#!/usr/bin/env bash
# SLEEP AND WAKE (issue 12) against a real `ebb serve` on the fake GPU:
# a 3 GiB pipeline is loaded and put to sleep (POST /v1/pipelines/big/sleep):
# the answer says 3 GiB released and 3 GiB of weights backed up, fakegpu-smi
# shows the server at 0 (its context released too); a second sleep is a 409;
# a job wakes it in place and its result is byte-identical to a fresh load's;
# a wake while another process (fakegpu-hold) holds the device fails with a
# clear 503, the pipeline stays asleep, and the wake succeeds once the memory
# is back; /metrics has the sleep families (promtool accepts them); with
# --sleep-host-budget, the oldest sleeper is unloaded instead.
set -u
: "${EBB_BUILD_DIR:?}"
. "$(dirname "$0")/../lib/server.sh"
export FAKEGPU_MEMORY_MIB=8192 FAKEGPU_CONTEXT_MIB=300
HOLD=
trap '{ [ -n "$HOLD" ] && kill "$HOLD"; stop_server; } >/dev/null 2>&1 || true' EXIT
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {
  "big": {"stages": [{"stage": "synthetic", "name": "s1", "cache": false,
                      "options": {"weights_mib": 2048, "activations_mib": 64, "touch": "sample"}},
                     {"stage": "synthetic", "name": "s2", "cache": false,
                      "options": {"weights_mib": 1024, "cache_mib": 32, "touch": "sample"}}]},
  "small": {"stages": [{"stage": "synthetic", "name": "m", "cache": false,
                        "options": {"weights_mib": 1536, "touch": "sample"}}]},
  "tiny": {"stages": [{"stage": "synthetic", "name": "t", "cache": false,
                       "options": {"weights_mib": 1024, "touch": "sample"}}]}}}
JSON
echo "any input" > "$T/input.txt"
start_server() { # log [flags...]
  local log=$1; shift
  serve "$log" --config "$T/cfg.json" --data-dir "$T/data" --input-dir "$T" --no-cache "$@"
}
smi_used() { held_by "$SERVER"; }
G3=$((3 << 30))

start_server "$T/log1"
req POST /v1/pipelines/big/load
[ "$CODE" = 200 ] || fail "load big: $CODE $BODY"
loaded=$(smi_used)
[ "$loaded" -ge 3300 ] || fail "big loaded: fakegpu-smi says $loaded MiB, expected >= 3300"

# --- sleep: 3 GiB back, weights in host memory, the process at 0
req POST /v1/pipelines/big/sleep
[ "$CODE" = 200 ] || fail "sleep big: $CODE $BODY"
[ "$(jget "$BODY" '["asleep"]')" = True ] || fail "sleep answer: $BODY"
[ "$(jget "$BODY" '["backup_bytes"]')" = "$G3" ] || fail "sleep backed up not exactly 3 GiB: $BODY"
[ "$(jget "$BODY" '["released_bytes"]')" -ge "$G3" ] || fail "sleep released under 3 GiB: $BODY"
[ -n "$(jget "$BODY" '["seconds"]')" ] || fail "sleep answer has no time: $BODY"
[ "$(smi_used)" = 0 ] || fail "asleep: fakegpu-smi says the server holds $(smi_used) MiB, expected 0"
req POST /v1/pipelines/big/sleep
[ "$CODE" = 409 ] && [ "$(jget "$BODY" '["error"]["code"]')" = conflict ] ||
  fail "a second sleep: $CODE $BODY (expected 409 conflict)"
case $(jget "$BODY" '["error"]["message"]') in *"asleep already"*) ;; *) fail "double sleep message: $BODY" ;; esac
req GET /v1/pipelines
case $BODY in *'"asleep": true'*|*'"asleep":true'*) ;; *) fail "/v1/pipelines does not show big asleep: $BODY" ;; esac
req GET /metrics
printf '%s\n' "$BODY" > "$T/metrics.txt"
grep -q '^ebb_pipelines_sleeping 1$' "$T/metrics.txt" || fail "metrics: ebb_pipelines_sleeping not 1"
grep -q "^ebb_sleep_backup_bytes $G3\$" "$T/metrics.txt" || fail "metrics: ebb_sleep_backup_bytes not 3 GiB"
# every kind of fact is counted: the sleep parked the pipeline's owners
parked=$(sed -n 's/^ebb_events_total{kind="parked"} //p' "$T/metrics.txt")
[ "${parked:-0}" -ge 1 ] || fail "metrics: ebb_events_total{kind=\"parked\"} is '${parked:-missing}' after a sleep"
for k in oom mark; do
  grep -q "^ebb_events_total{kind=\"$k\"} " "$T/metrics.txt" || fail "metrics: no ebb_events_total{kind=\"$k\"}"
done
if command -v promtool >/dev/null; then
  promtool check metrics < "$T/metrics.txt" > "$T/promtool.out" 2>&1 ||
    fail "promtool check metrics: $(cat "$T/promtool.out")"
else
  fail "promtool is missing (scripts/install-deps.sh installs Debian's prometheus)"
fi

# --- a job wakes it in place; the result is a fresh load's, byte for byte
run_job woken big
[ "$(smi_used)" -ge 3300 ] || fail "after the job the pipeline is not awake: $(smi_used) MiB"
grep -q '\[s1\] awake: ' "$T/log1" || fail "no '[s1] awake' line"
grep -q '\[s1\] load' "$T/log1" && fail "s1 was loaded again instead of woken"
req POST /v1/pipelines/big/wake
[ "$CODE" = 409 ] || fail "wake of an awake pipeline: $CODE $BODY (expected 409)"
req POST /v1/pipelines/big/unload
req POST /v1/pipelines/big/load
run_job fresh big
cmp -s "$T/woken.json" "$T/fresh.json" ||
  fail "the woken pipeline's result differs from a fresh load's: $(cat "$T/woken.json") vs $(cat "$T/fresh.json")"

pipe_field() { # pipeline field -> from GET /v1/pipelines
  python3 -c 'import json,sys; print([p for p in json.loads(sys.argv[1])["pipelines"] if p["name"] == sys.argv[2]][0][sys.argv[3]])' "$BODY" "$1" "$2" 2>/dev/null
}
req POST /v1/pipelines/big/unload

# --- a wake that runs out of memory stays asleep and can be retried (the
# stage checks its weights' pattern in every run: a job after the wake
# succeeds only if they came back intact)
req POST /v1/pipelines/small/load
req POST /v1/pipelines/small/sleep
[ "$CODE" = 200 ] || fail "sleep small: $CODE $BODY"
"$EBB_BUILD_DIR/fakegpu/fakegpu-hold" --alloc 7000 --wait < /dev/null > "$T/hold.out" 2>&1 &
HOLD=$!
for _ in $(seq 100); do grep -q '^ok 0x' "$T/hold.out" && break; sleep 0.1; done
grep -q '^ok 0x' "$T/hold.out" || fail "fakegpu-hold did not take 7000 MiB: $(cat "$T/hold.out")"
req POST /v1/pipelines/small/wake
[ "$CODE" = 503 ] && [ "$(jget "$BODY" '["error"]["code"]')" = out_of_memory ] ||
  fail "wake with the device held: $CODE $BODY (expected 503 out_of_memory)"
case $(jget "$BODY" '["error"]["message"]') in *"stays asleep"*) ;; *) fail "failed wake message: $BODY" ;; esac
used=$(smi_used)
[ "$used" -le 300 ] || fail "a failed wake left $used MiB mapped"
req GET /v1/pipelines
[ "$(pipe_field small asleep)" = True ] || fail "after a failed wake small is not asleep: $BODY"
kill "$HOLD"; wait "$HOLD" 2>/dev/null; HOLD=
req POST /v1/pipelines/small/wake
[ "$CODE" = 200 ] || fail "wake once memory is back: $CODE $BODY"
[ "$(jget "$BODY" '["restored_bytes"]')" -ge $((1536 << 20)) ] || fail "wake restored under 1.5 GiB: $BODY"
run_job retried small
stop_server

# --- the host budget: the oldest sleeper is unloaded instead
start_server "$T/log2" --sleep-host-budget 2GiB
req POST /v1/pipelines/tiny/load # its need is known afterwards: no switch later
req POST /v1/pipelines/tiny/unload
req POST /v1/pipelines/small/load
req POST /v1/pipelines/small/sleep
[ "$CODE" = 200 ] || fail "budget: sleep small: $CODE $BODY"
req POST /v1/pipelines/tiny/load
req POST /v1/pipelines/tiny/sleep
[ "$CODE" = 200 ] || fail "budget: sleep tiny: $CODE $BODY"
req GET /v1/pipelines
[ "$(pipe_field small loaded)" = False ] && [ "$(pipe_field tiny asleep)" = True ] ||
  fail "budget 2 GiB, 1.5 + 1 GiB asleep: small should be unloaded, tiny asleep: $BODY"
grep -q "over the budget of 2048 MiB: unloading pipeline 'small'" "$T/log2" || fail "no budget line"
stop_server

[ "$fails" = 0 ] && echo "server_sleep: ok"
exit $((fails > 0))
