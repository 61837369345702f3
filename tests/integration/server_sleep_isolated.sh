#!/usr/bin/env bash
# SLEEP OF AN ISOLATED STAGE (issue 12) against a real `ebb serve` on the
# fake GPU. An isolated stage's memory is its worker's, so it sleeps by
# stopping its worker (docs/architecture.md, "Sleep and wake"): in a
# pipeline of one in-process stage (256 MiB of weights) and one isolated
# stage (512 MiB), POST /sleep backs up the in-process weights (exactly
# 256 MiB) and stops the worker: fakegpu-smi lists no worker and the server
# at 0; the log says the worker stopped; a job wakes both (the in-process
# stage from its backup, the isolated one loaded again in a new worker) and
# its result is byte-identical to a fresh load's; POST /wake after a second
# sleep answers 200 and the worker is back on the device.
set -u
: "${EBB_WORKER:?}"
. "$(dirname "$0")/../lib/server.sh"
export FAKEGPU_MEMORY_MIB=8192 FAKEGPU_CONTEXT_MIB=300
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {
  "mix": {"stages": [{"stage": "synthetic", "name": "in1", "cache": false,
                      "options": {"weights_mib": 256, "touch": "sample"}},
                     {"stage": "synthetic", "name": "iso", "isolate": true, "cache": false,
                      "options": {"weights_mib": 512, "touch": "sample"}}]}}}
JSON
echo "any input" > "$T/input.txt"
serve "$T/log" --config "$T/cfg.json" --data-dir "$T/data" --input-dir "$T" --no-cache
server_mib() { held_by "$SERVER"; }
worker_mib() { apps | awk -F', *' -v p="$SERVER" '$1 != p {s += $2} END {print s + 0}'; }

req POST /v1/pipelines/mix/load
[ "$CODE" = 200 ] || fail "load mix: $CODE $BODY"
w=$(worker_mib)
[ "$w" -ge 512 ] || fail "loaded: the isolated stage's worker holds $w MiB, expected >= 512"

# --- sleep: the in-process weights backed up, the worker stopped
req POST /v1/pipelines/mix/sleep
[ "$CODE" = 200 ] || fail "sleep mix: $CODE $BODY"
[ "$(jget "$BODY" '["backup_bytes"]')" = $((256 << 20)) ] ||
  fail "sleep backed up not exactly the in-process stage's 256 MiB: $BODY"
[ "$(jget "$BODY" '["released_bytes"]')" -ge $((768 << 20)) ] ||
  fail "sleep released under 768 MiB (256 in-process + the worker's 512): $BODY"
[ "$(worker_mib)" = 0 ] || fail "asleep: a worker still holds $(worker_mib) MiB: $(apps)"
[ "$(server_mib)" = 0 ] || fail "asleep: the server holds $(server_mib) MiB, expected 0"
grep -q '\[iso\] asleep: isolated, its worker (pid [0-9]*) stopped' "$T/log" ||
  fail "no '[iso] asleep: isolated, its worker ... stopped' line"
req GET /v1/pipelines
case $BODY in *'"asleep": true'*|*'"asleep":true'*) ;; *) fail "/v1/pipelines does not show mix asleep: $BODY" ;; esac

# --- a job wakes both; the result is a fresh load's, byte for byte
run_job woken mix
grep -q '\[in1\] awake: ' "$T/log" || fail "no '[in1] awake' line"
grep -q '\[iso\] awake: isolated, loaded again in a new worker' "$T/log" ||
  fail "no '[iso] awake: isolated, loaded again' line"
req POST /v1/pipelines/mix/unload
req POST /v1/pipelines/mix/load
run_job fresh mix
cmp -s "$T/fresh.json" "$T/woken.json" ||
  fail "the woken pipeline's result differs from a fresh load's: $(cat "$T/woken.json") vs $(cat "$T/fresh.json")"

# --- POST /wake brings the worker back
req POST /v1/pipelines/mix/sleep
[ "$CODE" = 200 ] || fail "second sleep: $CODE $BODY"
req POST /v1/pipelines/mix/wake
[ "$CODE" = 200 ] || fail "wake mix: $CODE $BODY"
w=$(worker_mib)
[ "$w" -ge 512 ] || fail "woken: the worker holds $w MiB, expected >= 512"
req POST /v1/pipelines/mix/unload
[ "$CODE" = 200 ] || fail "unload mix: $CODE $BODY"
[ "$(worker_mib)" = 0 ] || fail "unloaded: a worker still holds $(worker_mib) MiB"

stop_server
[ "$fails" = 0 ] && echo "server_sleep_isolated: ok"
exit $((fails > 0))
