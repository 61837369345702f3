#!/bin/bash
# Session items have a deadline as jobs do, and a job's deadline counts its
# run, not its wait for a device an item holds (issue 45, "A deadline for
# every piece of work"). On the fake GPU, --job-timeout 3:
#   1. an item with run_ms 30000 ends within 4 s with 504 timed_out naming
#      the deadline and --job-timeout; the device is given back (0 MiB held
#      by the synthetic stage after it);
#   2. a job submitted while such an item runs waits for the device and then
#      succeeds: its 3 s are counted from its start, not from its pick;
#   3. with --max-wait 1 the same job fails unrun with EBB_EBUSY naming
#      --max-wait, about 1 s after it was picked, while the item still runs;
#   4. ?timeout_s=1 ends an item within 2 s; ?timeout_s above the server's
#      deadline, or not a number, is 400 naming it;
#   5. SIGTERM during a long item ends the server within --shutdown-grace
#      (5 here) + 1 s.
# (sanitizer builds: every limit + EBB_TEST_SLOWDOWN - 1 s)
set -u
: "${EBB:?}" "${EBB_BUILD_DIR:?}"
. "$(dirname "${BASH_SOURCE[0]}")/../lib/server.sh"
export no_proxy=127.0.0.1,localhost NO_PROXY=127.0.0.1,localhost
SLOW=$((${EBB_TEST_SLOWDOWN:-1} - 1))
now() { date +%s.%N; }
elapsed() { python3 -c 'import sys; print("%.2f" % (float(sys.argv[2]) - float(sys.argv[1])))' "$1" "$2"; }
le() { python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)' "$1" "$2"; }
echo x > "$T/input.txt"
cat > "$T/cfg.json" <<'EOF'
{"pipelines": {
  "syn": {"stages": [{"stage": "synthetic", "options": {"weights_mib": 16, "activations_mib": 16}}],
          "release": "never"}}}
EOF
J='Content-Type: application/json'
LONG='{"input": "'$T/input.txt'", "options": {"synthetic": {"run_ms": 30000}}}'
# item_bg OUT [QUERY]: posts the 30 s item in the background (pid in IPID),
# its code and body into OUT
item_bg() {
  curl -s -o "$1" -w '%{http_code}' -X POST "$URL/v1/sessions/$SID/items${2:-}" -H "$J" \
    -d "$LONG" > "$1.code" &
  IPID=$!
}
open_session() {
  req POST /v1/sessions -H "$J" -d '{"pipeline": "syn"}'
  [ "$CODE" = 201 ] || { fail "POST /v1/sessions: $CODE $BODY"; return 1; }
  SID=$(jget "$BODY" '["id"]')
}
# running_item: waits (5 s at most) until the synthetic stage runs the item
running_item() { wait_log "$1" 'synthetic.*run\|\[synthetic\] load' 50; sleep 0.3; }

# --- 1 and 2: the item's deadline; a job behind it waits, then runs ---------
serve "$T/s1.log" --config "$T/cfg.json" --data-dir "$T/d1" --input-dir "$T" --job-timeout 3
open_session || exit 1
t0=$(now)
item_bg "$T/item1"
sleep 0.5
req POST /v1/jobs -d "{\"pipeline\": \"syn\", \"input\": \"$T/input.txt\"}"
[ "$CODE" = 202 ] || fail "POST /v1/jobs behind the item: $CODE $BODY"
JOB=$(jget "$BODY" '["id"]')
wait "$IPID"
took=$(elapsed "$t0" "$(now)")
code=$(cat "$T/item1.code")
echo "item with run_ms 30000 under --job-timeout 3: $code after $took s"
[ "$code" = 504 ] || fail "1: the long item answered $code, not 504: $(cat "$T/item1")"
grep -q 'deadline' "$T/item1" && grep -q -- '--job-timeout' "$T/item1" ||
  fail "1: the item's error names neither its deadline nor --job-timeout: $(cat "$T/item1")"
le "$took" $((4 + SLOW)) || fail "1: the item under --job-timeout 3 ended after $took s (limit $((4 + SLOW)) s)"
wait_done "$JOB" 100
echo "the job queued behind it: $STATE $(jget "$BODY" '["error"]')"
[ "$STATE" = succeeded ] || fail "2: the job queued behind the item ended '$STATE' (it was charged for its wait?): $BODY"
req GET /v1/memory
held=$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(sum(o.get("current_bytes", 0) for o in d.get("owners", []) if "synthetic" in json.dumps(o) and o.get("kind") == "stage"))' "$BODY" 2>/dev/null)
echo "synthetic stage bytes after the items: ${held:-?}"
# 4. a shorter deadline asked for; a larger one or junk refused
t0=$(now)
item_bg "$T/item4" '?timeout_s=1'
wait "$IPID"
took=$(elapsed "$t0" "$(now)")
echo "item with ?timeout_s=1: $(cat "$T/item4.code") after $took s"
[ "$(cat "$T/item4.code")" = 504 ] || fail "4: ?timeout_s=1 answered $(cat "$T/item4.code"): $(cat "$T/item4")"
grep -q "item's timeout_s" "$T/item4" || fail "4: the error does not name the item's timeout_s: $(cat "$T/item4")"
le "$took" $((2 + SLOW)) || fail "4: the item with ?timeout_s=1 ended after $took s"
for q in 'timeout_s=10' 'timeout_s=abc' 'timeout_s=0'; do
  req POST "/v1/sessions/$SID/items?$q" -H "$J" -d "$LONG"
  [ "$CODE" = 400 ] && case $BODY in *timeout_s*) true ;; *) false ;; esac ||
    fail "4: ?$q answered $CODE (want 400 naming timeout_s): $BODY"
done
stop_server || fail "the server did not exit 0 on SIGTERM while idle"

# --- 3: --max-wait 1: the job behind the item gives up unrun ------------------
serve "$T/s3.log" --config "$T/cfg.json" --data-dir "$T/d3" --input-dir "$T" --job-timeout 6 \
  --max-wait 1 --shutdown-grace 5
open_session || exit 1
item_bg "$T/item3"
sleep 0.5
t0=$(now)
req POST /v1/jobs -d "{\"pipeline\": \"syn\", \"input\": \"$T/input.txt\"}"
JOB=$(jget "$BODY" '["id"]')
wait_done "$JOB" 100
took=$(elapsed "$t0" "$(now)")
echo "--max-wait 1, a job behind a 6 s item: $STATE after $took s: $(jget "$BODY" '["error"]')"
[ "$STATE" = failed ] || fail "3: the job behind the item ended '$STATE', not failed by --max-wait: $BODY"
[ "$(jget "$BODY" '["error"]["code"]')" = EBB_EBUSY ] || fail "3: the error code is not EBB_EBUSY: $BODY"
case $(jget "$BODY" '["error"]["message"]') in *--max-wait*) ;; *) fail "3: the error does not name --max-wait: $BODY" ;; esac
le "$took" $((3 + SLOW)) || fail "3: the job failed by --max-wait 1 only after $took s"
wait "$IPID"

# --- 5: SIGTERM during a long item -------------------------------------------
item_bg "$T/item5"
sleep 1
term_timed 15
rc=$TERM_RC stop=$TERM_S
wait "$IPID" 2>/dev/null
echo "SIGTERM during an item: exit $rc after $stop s"
[ $rc = 0 ] || fail "5: ebb serve exited $rc after SIGTERM during an item"
le "$stop" $((6 + SLOW)) || fail "5: SIGTERM to exit took $stop s (--shutdown-grace 5: at most 6 s)"
[ "$fails" = 0 ] || { echo "--- logs"; tail -n 15 "$T/s1.log" "$T/s3.log"; }
exit $((fails > 0))
