#!/usr/bin/env bash
# ebb serve's HTTP API on the fake GPU: healthz; a synthetic job polled to
# succeeded and its result; cancelling a long job; a failing job does not
# affect the next; errors in the fixed shape {"error": {"code", "message"}}
# (bad JSON says where, unknown pipeline/job 404, wrong method 405, body too
# large 413); /v1/memory, /metrics, POST /v1/release; a restart on the same
# data directory keeps the job history.
set -u
. "$(dirname "$0")/../lib/server.sh"
export FAKEGPU_MEMORY_MIB=4096 FAKEGPU_CONTEXT_MIB=300
start_server() { # log file
  serve "$1" --config "$T/cfg.json" --data-dir "$T/data" --input-dir "$T" --no-cache
}
expect_err() { # what status code
  [ "$CODE" = "$2" ] || fail "$1: HTTP $CODE, expected $2 (body: $BODY)"
  [ "$(jget "$BODY" '["error"]["code"]')" = "$3" ] || fail "$1: error code not $3: $BODY"
  [ -n "$(jget "$BODY" '["error"]["message"]')" ] || fail "$1: no error message: $BODY"
}
wait_state() { # id state [tries]
  local s=
  for _ in $(seq "${3:-100}"); do
    req GET "/v1/jobs/$1"
    s=$(jget "$BODY" '["state"]')
    [ "$s" = "$2" ] && return 0
    case $s in succeeded|failed|cancelled) break ;; esac
    sleep 0.1
  done
  fail "job $1 ended '$s', expected '$2': $BODY"
  return 1
}

cat > "$T/cfg.json" <<'JSON'
{"pipelines": {
  "quick": {"stages": [{"stage": "synthetic", "name": "q", "options": {"weights_mib": 64, "activations_mib": 32}}]},
  "long": {"stages": [{"stage": "synthetic", "name": "l", "options": {"weights_mib": 64, "run_ms": 20000}}]},
  "broken": {"stages": [{"stage": "synthetic", "name": "b", "options": {"weights_mib": 64, "fail": "run"}}]}},
 "server": {"max_json_kib": 4}}
JSON
echo "any input" > "$T/input.txt"
start_server "$T/log1"

req GET /healthz
[ "$CODE" = 200 ] && [ "$(jget "$BODY" '["status"]')" = ok ] || fail "healthz: $CODE $BODY"

# a job, polled to succeeded, and its result
req POST /v1/jobs -H 'Content-Type: application/json' \
  -d "{\"pipeline\": \"quick\", \"input\": \"$T/input.txt\"}"
[ "$CODE" = 202 ] || fail "POST /v1/jobs: HTTP $CODE: $BODY"
J1=$(jget "$BODY" '["id"]')
wait_state "$J1" succeeded
[ "$(jget "$BODY" '["stages"][0]["name"]')" = q ] || fail "job $J1: no per-stage entry: $BODY"
rel=$(jget "$BODY" '["stages"][0]["released_bytes"]')
[ "${rel:-0}" -ge $((96 << 20)) ] || fail "job $J1: stage q released ${rel:-?} bytes, expected >= 96 MiB"
req GET "/v1/jobs/$J1/result"
[ "$CODE" = 200 ] || fail "result: HTTP $CODE: $BODY"
[ "$(jget "$BODY" '["result"]["items"][1]["value"]["weights_mib"]')" = 64 ] ||
  fail "result: the stage's JSON item is missing: $BODY"
case $(jget "$BODY" '["files"]') in *"/jobs/$J1/out/result.json"*) ;; *) fail "result: files: $BODY" ;; esac

# options override per stage
req POST /v1/jobs -d "{\"pipeline\": \"quick\", \"input\": \"$T/input.txt\", \"options\": {\"q\": {\"weights_mib\": 16}}}"
J2=$(jget "$BODY" '["id"]')
wait_state "$J2" succeeded
req GET "/v1/jobs/$J2/result"
[ "$(jget "$BODY" '["result"]["items"][1]["value"]["weights_mib"]')" = 16 ] || fail "options override not applied: $BODY"

# cancel a long job while it runs; the result is 409 while it is not finished
req POST /v1/jobs -d "{\"pipeline\": \"long\", \"input\": \"$T/input.txt\"}"
JL=$(jget "$BODY" '["id"]')
wait_state "$JL" running
req GET "/v1/jobs/$JL/result"
expect_err "result while running" 409 not_finished
t0=$(date +%s)
req DELETE "/v1/jobs/$JL"
[ "$CODE" = 202 ] && [ "$(jget "$BODY" '["state"]')" = cancelling ] || fail "DELETE running job: $CODE $BODY"
wait_state "$JL" cancelled 100
[ $(( $(date +%s) - t0 )) -lt 10 ] || fail "the cancel took more than 10 s"
req DELETE "/v1/jobs/$JL"
expect_err "cancel a finished job" 409 already_finished
# cancel a queued job: one long job runs, the next waits in the queue
req POST /v1/jobs -d "{\"pipeline\": \"long\", \"input\": \"$T/input.txt\"}"
JA=$(jget "$BODY" '["id"]')
req POST /v1/jobs -d "{\"pipeline\": \"quick\", \"input\": \"$T/input.txt\"}"
JB=$(jget "$BODY" '["id"]')
wait_state "$JA" running
req GET "/v1/jobs/$JB"
[ "$(jget "$BODY" '["state"]')" = queued ] || fail "second job not queued behind the first: $BODY"
req DELETE "/v1/jobs/$JB"
[ "$CODE" = 202 ] && [ "$(jget "$BODY" '["state"]')" = cancelled ] || fail "DELETE queued job: $CODE $BODY"
req DELETE "/v1/jobs/$JA"
wait_state "$JA" cancelled

# a failing job does not affect the next
req POST /v1/jobs -d "{\"pipeline\": \"broken\", \"input\": \"$T/input.txt\"}"
JF=$(jget "$BODY" '["id"]')
wait_state "$JF" failed
[ -n "$(jget "$BODY" '["error"]["message"]')" ] || fail "failed job without a message: $BODY"
req GET "/v1/jobs/$JF/result"
expect_err "result of a failed job" 409 no_result
req POST /v1/jobs -d "{\"pipeline\": \"quick\", \"input\": \"$T/input.txt\"}"
wait_state "$(jget "$BODY" '["id"]')" succeeded

# errors
req POST /v1/jobs -d '{"pipeline": "quick", "input": '
expect_err "bad JSON" 400 bad_json
case $BODY in *line*column*) ;; *) fail "bad JSON: the message does not say where: $BODY" ;; esac
req POST /v1/jobs -d "{\"pipeline\": \"nosuch\", \"input\": \"$T/input.txt\"}"
expect_err "unknown pipeline" 404 not_found
case $BODY in *nosuch*quick*) ;; *) fail "unknown pipeline: message names neither it nor the known: $BODY" ;; esac
req POST /v1/jobs -d "{\"pipeline\": \"quick\", \"input\": \"$T/missing.txt\"}"
expect_err "missing input" 400 bad_input
req POST /v1/jobs -d "{\"pipeline\": \"quick\", \"input\": \"$T/input.txt\", \"options\": {\"zz\": {}}}"
expect_err "options for an unknown stage" 400 bad_request
req POST /v1/jobs -d "{\"pipeline\": \"quick\", \"input\": \"$T/input.txt\", \"options\": {\"q\": {\"weights_mib\": \"x\"}}}"
expect_err "bad option value" 400 bad_request
req GET /v1/jobs/999999
expect_err "unknown job" 404 not_found
req GET /v1/jobs/abc
expect_err "non-numeric job id" 404 not_found
req GET /v1/nothing
expect_err "unknown route" 404 not_found
req GET /page/nosuch.js
expect_err "unknown page file" 404 not_found
# a control byte in the name (the URL decoded): still JSON
req GET "/page/z%04b%C3%A8"
expect_err "a page file name with a control byte" 404 not_found
req PUT /v1/jobs
expect_err "PUT /v1/jobs" 405 method_not_allowed
req GET /v1/release
expect_err "GET /v1/release" 405 method_not_allowed
req POST /healthz
expect_err "POST /healthz" 405 method_not_allowed
big=$(python3 -c 'print("{\"pipeline\": \"quick\", \"pad\": \"" + "x" * 8000 + "\"}")')
req POST /v1/jobs -d "$big"
expect_err "body too large" 413 body_too_large
req POST /v1/pipelines/nosuch/load
expect_err "load unknown pipeline" 404 not_found
req DELETE /v1/sessions/nosuch
expect_err "unknown session" 404 not_found
# unknown keys are refused by name, as for a job (found by schemathesis)
req POST /v1/sessions -d '{"pipeline": "quick", "piepline": "x"}'
expect_err "a session body with an unknown key" 400 bad_request
case $BODY in *piepline*) ;; *) fail "the 400 does not name the unknown key: $BODY" ;; esac
req POST /v1/sessions -d '{"pipeline": "quick"}'
[ "$CODE" = 201 ] || fail "POST /v1/sessions: $CODE $BODY"
SQ=$(jget "$BODY" '["id"]')
req POST "/v1/sessions/$SQ/items" -d "{\"pipeline\": \"long\", \"input\": \"$T/input.txt\"}"
expect_err "an item naming a pipeline (a session has one)" 400 bad_request
case $BODY in *'unknown key'*pipeline*) ;; *) fail "the 400 does not name pipeline: $BODY" ;; esac
req DELETE "/v1/sessions/$SQ"
[ "$CODE" = 200 ] || fail "DELETE the session: $CODE $BODY"
req POST /v1/pipelines/quick/unload # the session loaded it; what follows starts idle
req GET /healthz
[ "$CODE" = 200 ] || fail "the server stopped answering after the errors"

# pipelines, memory, metrics, release
req GET /v1/pipelines
for p in quick long broken synthetic songtrace; do
  case $BODY in *"\"name\":\"$p\""*) ;; *) fail "/v1/pipelines lacks $p: $BODY" ;; esac
done
req GET /v1/memory
for k in device allocator owners context pinned unattributed; do
  [ -n "$(jget "$BODY" "[\"$k\"]")" ] || fail "/v1/memory lacks $k: $BODY"
done
[ "$(jget "$BODY" '["device"]["label"]')" = cuda:0 ] || fail "/v1/memory: device: $BODY"
[ "$(jget "$BODY" '["allocator"]["reserved_bytes"]')" = 0 ] || fail "/v1/memory: idle server reserves: $BODY"
req GET /metrics
for k in 'ebb_jobs{state="succeeded"} 3' 'ebb_jobs{state="cancelled"} 3' 'ebb_jobs{state="failed"} 1' \
         ebb_released_bytes_total ebb_device_reserved_bytes ebb_device_allocated_bytes \
         ebb_device_cached_bytes ebb_device_free_bytes 'ebb_context_held{device="cuda:0"} 0' ebb_owner_bytes; do
  case $BODY in *"$k"*) ;; *) fail "/metrics lacks '$k'" ;; esac
done
relt=$(echo "$BODY" | sed -n 's/^ebb_released_bytes_total //p')
[ "${relt:-0}" -ge $((96 << 20)) ] || fail "/metrics: released total ${relt:-?}"
# a loaded pipeline holds memory; release gives back what is cached
req POST /v1/pipelines/quick/load
[ "$CODE" = 200 ] || fail "load quick: $CODE $BODY"
req GET /metrics
case $BODY in *'ebb_owner_bytes{owner="q",device="cuda:0"} 67108864'*) ;; *) fail "/metrics: owner q not at 64 MiB while loaded" ;; esac
case $BODY in *'ebb_pipeline_loaded{pipeline="quick"} 1'*) ;; *) fail "/metrics: quick not loaded" ;; esac
req POST /v1/release
[ "$CODE" = 200 ] && [ -n "$(jget "$BODY" '["released_bytes"]')" ] || fail "POST /v1/release: $CODE $BODY"
req POST /v1/pipelines/quick/unload
[ "$CODE" = 200 ] || fail "unload quick: $CODE $BODY"
[ "$(jget "$BODY" '["released_bytes"]')" -ge $((64 << 20)) ] || fail "unload released too little: $BODY"
used=$(held_by "$SERVER")
[ "$used" = 0 ] || fail "idle server holds $used MiB on the device after unload"
req POST /v1/release
[ "$(jget "$BODY" '["released_bytes"]')" = 0 ] || fail "release on an idle server: $BODY"

# SIGINT with a job running and one queued: the running one is stopped and
# queued again, the queued one stays queued for the next server; exit status 0
req POST /v1/jobs -d "{\"pipeline\": \"long\", \"input\": \"$T/input.txt\"}"
JR=$(jget "$BODY" '["id"]')
req POST /v1/jobs -d "{\"pipeline\": \"quick\", \"input\": \"$T/input.txt\"}"
JQ=$(jget "$BODY" '["id"]')
wait_state "$JR" running
kill -INT "$SERVER"; wait "$SERVER"; rc=$?; SERVER=
[ "$rc" = 0 ] || fail "ebb serve exited $rc on SIGINT, expected 0"
grep -q '^\[server\] SIGINT: stopping' "$T/log1" || fail "no SIGINT line in the log"
grep -q '^\[server\] stopped: 0 MiB reserved, context released' "$T/log1" ||
  fail "the server did not end with everything released: $(tail -3 "$T/log1")"
# restart on the same data directory: the history is kept
start_server "$T/log2"
# the job running at SIGINT did not fail: it is queued again and runs
req GET "/v1/jobs/$JR"
case $(jget "$BODY" '["state"]') in queued|running) ;; *) fail "after restart, the job running at SIGINT is not queued again: $BODY" ;; esac
wait_state "$JR" running
req DELETE "/v1/jobs/$JR"
wait_state "$JR" cancelled
wait_state "$JQ" succeeded
req GET "/v1/jobs/$J1"
[ "$CODE" = 200 ] && [ "$(jget "$BODY" '["state"]')" = succeeded ] || fail "after restart, job $J1: $CODE $BODY"
req GET "/v1/jobs/$JF"
[ "$(jget "$BODY" '["state"]')" = failed ] || fail "after restart, job $JF: $BODY"
req POST /v1/jobs -d "{\"pipeline\": \"quick\", \"input\": \"$T/input.txt\"}"
JN=$(jget "$BODY" '["id"]')
# ids grant access: 128 random bits, never the next number
case $JN in [0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]*) ;; *) fail "new job id '$JN' is not hex" ;; esac
[ ${#JN} = 32 ] || fail "new job id $JN is not 128 bits (32 hex digits)"
[ "$JN" != "$JF" ] && [ "$JN" != "$J1" ] || fail "new job id $JN repeats an old one"
wait_state "$JN" succeeded
stop_server || fail "second ebb serve exited nonzero"
grep -q 'out of' "$T/log1" && fail "log1 mentions running out: $(grep 'out of' "$T/log1")"
if [ "$fails" -ne 0 ]; then
  echo "--- server log"; cat "$T/log1" "$T/log2"; exit 1
fi
echo "server_api: all checks passed"
