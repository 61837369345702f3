#!/bin/bash
# Fair limits on the queue (issue 45): one token flooding the queue leaves
# the others able to submit, and the files queued jobs keep on disk have a
# budget, per token and in all. Two submit tokens A and B (and C), the device
# held by a long job so that every later job waits:
#   1. --max-queued-per-token 5: A's 6th waiting job gets 429 queue_full
#      (Retry-After) naming --max-queued-per-token; B still submits (202);
#   2. --max-queued 8 still caps the whole queue: B's jobs past it get 429
#      naming --max-queued;
#   3. --queued-bytes-per-token 1MiB, --queued-bytes 1536KiB: A's second
#      600 KiB upload gets 429 naming --queued-bytes-per-token; B's is taken
#      (1.2 MiB queued); C's then gets 507 insufficient_storage naming
#      --queued-bytes; nothing of the refused ones is stored;
#   4. a bad value of each flag exits 2 naming it; --help lists them.
# (At the defaults, one token submitting 10,000 jobs: server_fair_flood, long.)
set -u
: "${EBB:?}" "${EBB_BUILD_DIR:?}"
. "$(dirname "${BASH_SOURCE[0]}")/../lib/server.sh"
. "$(dirname "${BASH_SOURCE[0]}")/../lib/fair.sh"

# --- 1 and 2: job counts ------------------------------------------------------
serve "$T/s1.log" --config "$T/cfg.json" --data-dir "$T/d1" --input-dir "$T" --token-file "$T/tokens" \
  --max-queued 8 --max-queued-per-token 5 --no-cache
hold "$T/s1.log"
for i in 1 2 3 4 5; do
  post "$A" syn
  [ "$CODE" = 202 ] || fail "A's job $i of 5: $CODE $BODY"
done
curl -s -D "$T/hdr" -o /dev/null -X POST "$URL/v1/jobs" -H "Authorization: Bearer $A" \
  -H 'Content-Type: application/json' -d "{\"pipeline\": \"syn\", \"input\": \"$T/input.txt\"}"
post "$A" syn
refused "A's 6th waiting job" 429 queue_full --max-queued-per-token
grep -qi '^Retry-After: [0-9]' "$T/hdr" || fail "the per-token 429 has no Retry-After: $(cat "$T/hdr")"
for i in 1 2 3; do
  post "$B" syn
  [ "$CODE" = 202 ] || fail "B's job $i while A is at its cap: $CODE $BODY (one token locked another out)"
done
post "$B" syn
refused "B's job past the queue's 8" 429 queue_full --max-queued
stop_server || fail "server 1 did not stop cleanly"

# --- 3: the disk budget -------------------------------------------------------
serve "$T/s3.log" --config "$T/cfg.json" --data-dir "$T/d3" --input-dir "$T" --token-file "$T/tokens" \
  --queued-bytes-per-token 1MiB --queued-bytes 1.5MiB --no-cache
hold "$T/s3.log"
upload "$A"
[ "$CODE" = 202 ] || fail "A's first 600 KiB upload: $CODE $BODY"
upload "$A"
refused "A's second 600 KiB upload (1 MiB per token)" 429 queue_full --queued-bytes-per-token
upload "$B"
[ "$CODE" = 202 ] || fail "B's 600 KiB upload while A is at its budget: $CODE $BODY"
n0=$(find "$T/d3/jobs" -mindepth 1 -maxdepth 1 | wc -l)
upload "$C"
refused "C's 600 KiB upload (1.5 MiB in all)" 507 insufficient_storage --queued-bytes
n1=$(find "$T/d3/jobs" -mindepth 1 -maxdepth 1 | wc -l)
[ "$n0" = "$n1" ] || fail "the refused upload left a job directory ($n0 before, $n1 after)"
stop_server || fail "server 3 did not stop cleanly"

# --- 4: usage ---------------------------------------------------------------------
for bad in "--max-queued-per-token 0" "--queued-bytes lots" "--queued-bytes-per-token -1"; do
  # shellcheck disable=SC2086
  "$EBB" serve $bad --data-dir "$T/d4" > /dev/null 2> "$T/usage.err"
  rc=$?
  [ $rc = 2 ] || fail "ebb serve $bad exited $rc, not 2"
  grep -q -- "${bad%% *}" "$T/usage.err" || fail "ebb serve $bad: the error does not name the flag: $(cat "$T/usage.err")"
done
"$EBB" serve --help > "$T/help"
for f in --max-queued-per-token --queued-bytes --queued-bytes-per-token; do
  grep -q -- "$f " "$T/help" || fail "--help does not list $f"
done
[ "$fails" = 0 ] && echo "server_fair_limits: all checks passed"
exit $((fails > 0))
