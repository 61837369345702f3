#!/usr/bin/env bash
# With --queue, a job has a deadline as on one node (issue 45, "A deadline
# for every piece of work"): a node started with --job-timeout 2 runs a
# synthetic job with run_ms 30000 and fails it EBB_ETIMEDOUT within 3 s of
# its start, the message naming the deadline and --job-timeout; the node's
# next job succeeds (sanitizer builds: + EBB_TEST_SLOWDOWN - 1 s).
set -u
: "${EBB:?}"
. "$(dirname "$0")/../lib/cluster.sh"
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {"syn": {"stages": [{"stage": "synthetic", "options": {"weights_mib": 4}}]}}}
JSON
echo x > "$T/input.txt"
start_redis
FAKEGPU_STATE="$T/gpu" "$EBB" serve --config "$T/cfg.json" --listen 127.0.0.1:0 --data-dir "$T/data" \
  --input-dir "$T" --no-cache --queue "redis://127.0.0.1:$PORT/0" --queue-prefix t --node-id n1 \
  --job-timeout 2 > "$T/log-n1" 2>&1 &
NPID[n1]=$!
node_up n1
# job OPTIONS: submits, waits (20 s at most) for its end; BODY is the job
job() {
  BODY=$(curl -s -X POST "${URL[n1]}/v1/jobs" -H 'Content-Type: application/json' \
    -d "{\"pipeline\": \"syn\", \"input\": \"$T/input.txt\", \"options\": $1}")
  local id st
  id=$(jget "$BODY" '["id"]')
  [ -n "$id" ] || { fail "POST /v1/jobs: $BODY"; return 1; }
  for _ in $(seq 200); do
    BODY=$(curl -s "${URL[n1]}/v1/jobs/$id")
    st=$(jget "$BODY" '["state"]')
    case $st in succeeded | failed | cancelled) return 0 ;; esac
    sleep 0.1
  done
  fail "job $id did not end in 20 s: $BODY"
  return 1
}
job '{"synthetic": {"run_ms": 30000}}'
echo "the 30 s job under --job-timeout 2: $(jget "$BODY" '["state"]') $(jget "$BODY" '["error"]')"
[ "$(jget "$BODY" '["state"]')" = failed ] || fail "the 30 s job did not fail: $BODY"
[ "$(jget "$BODY" '["error"]["code"]')" = EBB_ETIMEDOUT ] || fail "not EBB_ETIMEDOUT: $BODY"
case $(jget "$BODY" '["error"]["message"]') in *deadline*--job-timeout*) ;;
*) fail "the error names neither the deadline nor --job-timeout: $BODY" ;; esac
took=$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print("%.2f" % (d["finished"] - d["started"]))' "$BODY" 2>/dev/null)
echo "ended ${took:-?} s after its start"
python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)' "${took:-99}" \
  $((3 + ${EBB_TEST_SLOWDOWN:-1} - 1)) || fail "the job ended ${took:-?} s after its start (limit 3 s)"
job '{}'
[ "$(jget "$BODY" '["state"]')" = succeeded ] || fail "the next job: $BODY"
[ "$fails" = 0 ] || { echo "--- node log"; tail -n 20 "$T/log-n1"; }
exit $((fails > 0))
