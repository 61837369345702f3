#!/usr/bin/env bash
# GET /v1/jobs/ID/files/NAME on one node (no --queue): the bytes of an
# output the job's result lists, 404 naming an unlisted name, 404 for a
# name that tries to leave the job's outputs, 409 before the job has
# succeeded. (tests/integration/cluster_store.sh covers the same route
# across nodes on Redis.)
set -u
: "${EBB:?}" "${EBB_TEST_TMP:?}" "${FAKEGPU_STATE:?}"
T=$EBB_TEST_TMP
rm -rf "$T" && mkdir -p "$T"
rm -f "$FAKEGPU_STATE"
export FAKEGPU_MEMORY_MIB=2048
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
SERVER=
trap '[ -n "$SERVER" ] && kill -TERM "$SERVER" 2>/dev/null && wait "$SERVER"' EXIT
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {"Q": {"stages": [{"stage": "synthetic", "name": "q1", "options": {"weights_mib": 16, "run_ms": 20}}]},
               "slow": {"stages": [{"stage": "synthetic", "name": "s1", "options": {"run_ms": 3000}}]}}}
JSON
echo "small input" > "$T/input.txt"
"$EBB" serve --config "$T/cfg.json" --listen 127.0.0.1:0 --data-dir "$T/data" --input-dir "$T" \
  --no-cache > "$T/log" 2>&1 &
SERVER=$!
for _ in $(seq 100); do grep -q '^ebb: listening on' "$T/log" 2>/dev/null && break; sleep 0.1; done
URL=$(head -1 "$T/log" | sed -n 's/^ebb: listening on //p')
[ -n "$URL" ] || { echo "FAIL: no listening line"; cat "$T/log"; exit 1; }
jget() { python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(eval("d"+sys.argv[2]))' "$1" "$2" 2>/dev/null; }
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
