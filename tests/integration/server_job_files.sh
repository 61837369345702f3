#!/usr/bin/env bash
# GET /v1/jobs/ID/files/NAME on one node (no --queue): the bytes of an
# output the job's result lists, 404 naming an unlisted name, 404 for a
# name that tries to leave the job's outputs, 409 before the job has
# succeeded. (tests/integration/cluster_store.sh covers the same route
# across nodes on Redis.)
set -u
. "$(dirname "$0")/../lib/server.sh"
export FAKEGPU_MEMORY_MIB=2048
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {"Q": {"stages": [{"stage": "synthetic", "name": "q1", "options": {"weights_mib": 16, "run_ms": 20}}]},
               "slow": {"stages": [{"stage": "synthetic", "name": "s1", "options": {"run_ms": 3000}}]}}}
JSON
echo "small input" > "$T/input.txt"
serve "$T/log" --config "$T/cfg.json" --data-dir "$T/data" --input-dir "$T" --no-cache
submit() { jget "$(curl -s -X POST "$URL/v1/jobs" -H 'Content-Type: application/json' \
                 -d "{\"pipeline\": \"$1\", \"input\": \"$T/input.txt\"}")" '["id"]'; }

ID=$(submit Q)
SLOW=$(submit slow)
[ -n "$ID" ] && [ -n "$SLOW" ] || fail "submissions were refused"
for _ in $(seq 100); do
  [ "$(jget "$(curl -s "$URL/v1/jobs/$ID")" '["state"]')" = succeeded ] && break; sleep 0.1
done
res=$(curl -s "$URL/v1/jobs/$ID/result")
path=$(python3 -c 'import json,sys; print(*[f for f in json.loads(sys.argv[1])["files"] if f.endswith("/result.json")][:1])' "$res" 2>/dev/null)
[ -n "$path" ] && [ -f "$path" ] || fail "the result lists no result.json: $res"
code=$(curl -s -o "$T/got.json" -w '%{http_code}' "$URL/v1/jobs/$ID/files/result.json")
[ "$code" = 200 ] && cmp -s "$T/got.json" "$path" || fail "files/result.json: $code, $(head -c 200 "$T/got.json")"
out=$(curl -s -w '\n%{http_code}' "$URL/v1/jobs/$ID/files/nosuch.bin")
[ "${out##*$'\n'}" = 404 ] && case $out in *"has no output 'nosuch.bin'"*) true ;; *) false ;; esac ||
  fail "files/nosuch.bin: expected 404 naming the unlisted output, got $out"
code=$(curl -s -o /dev/null -w '%{http_code}' "$URL/v1/jobs/$ID/files/..%2F..%2Flock")
[ "$code" = 404 ] || fail "files/..%2F..%2Flock (outside the outputs): expected 404, got $code"
out=$(curl -s -w '\n%{http_code}' "$URL/v1/jobs/$SLOW/files/result.json")
[ "${out##*$'\n'}" = 409 ] || fail "files of a job still running: expected 409, got $out"
out=$(curl -s -w '\n%{http_code}' "$URL/v1/jobs/00000000000000000000000000000000/files/result.json")
[ "${out##*$'\n'}" = 404 ] || fail "files of an unknown job: expected 404, got $out"
if [ "$fails" != 0 ]; then tail -20 "$T/log"; echo "$fails failure(s)"; exit 1; fi
echo "server_job_files: all checks passed"
