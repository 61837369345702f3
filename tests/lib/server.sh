# Sourced by the integration tests that drive `ebb serve` on the fake GPU
# (after `set -u` and their `: "${VAR:?}"` checks). Gives fakegpu.sh (T, fail,
# a fresh fake device, apps, held_by), plus:
#   serve LOG ARGS...  start `$EBB serve --listen 127.0.0.1:0 ARGS...` with its
#                      output in LOG; sets SERVER (pid) and URL; a server that
#                      prints no listening line in 10 s fails the test (exit 1)
#   stop_server        SIGTERM it and wait; answers its exit status
#   req METHOD PATH [curl args...]  sets CODE and BODY (a -d body is JSON)
#   wait_done ID, run_job NAME PIPELINE, drive LOG CMD...,
#   wait_log FILE PATTERN [TRIES], term_timed SECONDS  (below)
# The EXIT trap stops a server still running; a test that has more to clean
# up sets its own trap and calls stop_server from it.
: "${EBB:?}"
. "$(dirname "${BASH_SOURCE[0]}")/fakegpu.sh"
SERVER= URL=
serve() {
  local log=$1; shift
  "$EBB" serve --listen 127.0.0.1:0 "$@" > "$log" 2>&1 &
  SERVER=$!
  for _ in $(seq 100); do grep -q '^ebb: listening on http://' "$log" 2>/dev/null && break; sleep 0.1; done
  URL=$(head -1 "$log" | sed -n 's/^ebb: listening on //p')
  [ -n "$URL" ] || { echo "FAIL: no listening line; log $log:"; cat "$log"; exit 1; }
}
stop_server() { # a server that died before answers its own exit status
  [ -n "$SERVER" ] || return 0
  kill -TERM "$SERVER" 2>/dev/null; wait "$SERVER"; local rc=$?; SERVER=; return $rc
}
trap 'stop_server >/dev/null 2>&1 || true' EXIT
req() {
  local m=$1 p=$2; shift 2
  local ct=() # JSON bodies say so (the server refuses other types for them)
  case " $* " in *" -d "*) ct=(-H 'Content-Type: application/json') ;; esac
  BODY=$(curl -s -o - -w '\n%{http_code}' -X "$m" "$URL$p" "${ct[@]}" "$@")
  CODE=${BODY##*$'\n'}
  BODY=${BODY%$'\n'*}
}
# drive LOG CMD...: runs CMD (a test's driver, given $URL) against the
# server, then stops the server; a CMD that fails, or a server that does not
# exit 0 on SIGTERM, fails the test at once with the server's LOG.
drive() {
  local log=$1 rc src; shift
  "$@"; rc=$?
  stop_server; src=$?
  [ $src -eq 0 ] || { echo "FAIL: ebb serve ($log) exited $src on SIGTERM"; rc=1; }
  [ $rc -eq 0 ] || { echo "--- server log $log"; cat "$log"; exit 1; }
}
# term_timed SECONDS: SIGTERM the server and wait up to SECONDS (whole) for
# it to exit, then SIGKILL it; TERM_RC its exit status (124: still running
# at SECONDS), TERM_S the seconds from the signal to the exit (two decimals).
# Call it directly, not in $(...): the server is this shell's child.
term_timed() {
  local t0 t1 i
  t0=$(date +%s.%N)
  kill -TERM "$SERVER"
  TERM_RC=124
  for ((i = 0; i < $1 * 100; i++)); do
    kill -0 "$SERVER" 2>/dev/null || { wait "$SERVER"; TERM_RC=$?; break; }
    sleep 0.01
  done
  t1=$(date +%s.%N)
  [ $TERM_RC = 124 ] && kill -KILL "$SERVER" 2>/dev/null
  SERVER=
  TERM_S=$(python3 -c 'import sys; print("%.2f" % (float(sys.argv[2]) - float(sys.argv[1])))' "$t0" "$t1")
}
# wait_done ID [TRIES]: polls GET /v1/jobs/ID (0.1 s apart, TRIES times, 300
# by default) until the job has ended; its state in STATE, the job in BODY.
wait_done() {
  STATE=
  for _ in $(seq "${2:-300}"); do
    req GET "/v1/jobs/$1"
    STATE=$(jget "$BODY" '["state"]')
    case $STATE in succeeded|failed|cancelled) return 0 ;; esac
    sleep 0.1
  done
  fail "job $1 did not end in $((${2:-300} / 10)) s: $BODY"
  return 1
}
# wait_log FILE PATTERN [TRIES]: polls FILE (0.1 s apart, TRIES times, 100
# by default) until a line matches PATTERN (grep's basic regex); answers 1 if
# none did. The API can show a change before the server has logged it (the
# line carries figures known only once the change is done), so a test that
# saw a state through the API waits for the line instead of grepping once.
wait_log() {
  for _ in $(seq "${3:-100}"); do grep -q -- "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}
# run_job NAME PIPELINE: one job of PIPELINE on $T/input.txt that must
# succeed; its result's items (JSON, keys sorted) in $T/NAME.json, a file
# item's path as its name (each job reads its own copy of the input, in its
# own directory)
run_job() {
  req POST /v1/jobs -d "{\"pipeline\": \"$2\", \"input\": \"$T/input.txt\"}"
  [ "$CODE" = 202 ] || { fail "POST /v1/jobs ($1): $CODE $BODY"; return 1; }
  local id
  id=$(jget "$BODY" '["id"]')
  wait_done "$id"
  [ "$STATE" = succeeded ] || { fail "job for $1 ended '$STATE': $BODY"; return 1; }
  req GET "/v1/jobs/$id/result"
  python3 -c 'import json,os,sys
items = json.loads(sys.argv[1])["result"]["items"]
for i in items:
    if i.get("kind") == "file":
        i["path"] = os.path.basename(i["path"])
print(json.dumps(items, sort_keys=True))' \
    "$BODY" > "$T/$1.json" || fail "result of $1: $BODY"
}
