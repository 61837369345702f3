#!/usr/bin/env bash
# The shutdown grace (issue 31): a plugin stage run in-process that never
# polls its cancellation (the test plugin's echo with EBB_TEST_ECHO_DEAF_S)
# does not hold `ebb serve` past --shutdown-grace: SIGTERM during its job
# ends the server within the grace (plus a margin for the exit), with status
# 1 and a line saying why. Without a stuck stage the stop is orderly (exit 0).
set -u
: "${EBB:?}" "${EBB_TEST_PLUGIN_DIR:?}"
. "$(dirname "$0")/../lib/server.sh"
echo x >"$T/input.txt"
cat >"$T/cfg.json" <<EOF
{"plugin_dirs": ["$EBB_TEST_PLUGIN_DIR/good"],
 "pipelines": {"deaf": {"stages": [{"stage": "echo"}]}}}
EOF
EBB_TEST_ECHO_DEAF_S=60 serve "$T/serve.log" --config "$T/cfg.json" --data-dir "$T/data" \
  --input-dir "$T" --shutdown-grace 1
req POST /v1/jobs -d "{\"pipeline\": \"deaf\", \"input\": \"$T/input.txt\"}"
[ "$CODE" = 202 ] || fail "POST /v1/jobs: $CODE $BODY"
wait_log "$T/serve.log" "running pipeline 'deaf'" || fail "the job never ran"
sleep 0.3
term_timed 10
rc=$TERM_RC took=$TERM_S
echo "SIGTERM to exit with a deaf stage and --shutdown-grace 1: $took s (status $rc)"
[ $rc = 1 ] || fail "ebb serve exited $rc (124: still running after 10 s), expected 1 past the grace"
python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) <= 3.0 else 1)' "$took" ||
  fail "SIGTERM to exit took $took s with --shutdown-grace 1 (expected at most 3 s)"
grep -q 'longer than the shutdown grace of 1 s' "$T/serve.log" ||
  fail "no line naming the shutdown grace in the log: $(tail -5 "$T/serve.log")"
# The same deaf stage isolated ("isolate": true) under --job-timeout 2: its
# worker is killed at the deadline, the job fails within 3 s of its start,
# the next job runs, and SIGTERM during such a job is an orderly stop (exit 0).
cat >"$T/cfg2.json" <<EOF
{"plugin_dirs": ["$EBB_TEST_PLUGIN_DIR/good"],
 "pipelines": {"deaf": {"stages": [{"stage": "echo", "isolate": true}]},
               "quick": {"stages": [{"stage": "synthetic", "options": {"weights_mib": 1, "activations_mib": 1}}]}}}
EOF
EBB_TEST_ECHO_DEAF_S=60 serve "$T/serve2.log" --config "$T/cfg2.json" --data-dir "$T/data2" \
  --input-dir "$T" --job-timeout 2
req POST /v1/jobs -d "{\"pipeline\": \"deaf\", \"input\": \"$T/input.txt\"}"
[ "$CODE" = 202 ] || fail "POST /v1/jobs (isolated): $CODE $BODY"
id=$(jget "$BODY" '["id"]')
wait_done "$id" 100
code=$(jget "$BODY" '["error"]["code"]')
took=$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print("%.2f" % (d["finished"] - d["started"]))' "$BODY")
echo "isolated deaf stage under --job-timeout 2: $STATE ($code) $took s after its start"
[ "$STATE" = failed ] && [ "$code" = EBB_ETIMEDOUT ] || fail "the isolated deaf job ended $STATE/$code: $BODY"
python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) <= 3.0 else 1)' "$took" ||
  fail "the isolated deaf job ended $took s after its start (timeout 2 s, limit 3 s)"
req POST /v1/jobs -d "{\"pipeline\": \"quick\", \"input\": \"$T/input.txt\"}"
id=$(jget "$BODY" '["id"]')
wait_done "$id" 100
[ "$STATE" = succeeded ] || fail "the job after the killed worker ended $STATE: $BODY"
stop_server || fail "ebb serve did not exit 0 on SIGTERM after the isolated deaf job"
# usage: the grace must be a number of seconds > 0
"$EBB" serve --shutdown-grace 0 >/dev/null 2>"$T/usage.err"
[ $? = 2 ] || fail "--shutdown-grace 0 did not exit 2"
grep -q -- '--shutdown-grace 0' "$T/usage.err" || fail "the usage error does not name the flag: $(cat "$T/usage.err")"
[ $fails = 0 ] || { echo "--- server log"; cat "$T/serve.log"; }
exit $((fails > 0))
