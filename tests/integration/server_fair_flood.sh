#!/bin/bash
# Fair limits at the defaults (issue 45, "One token submitting 10,000 jobs
# leaves another token able to submit"): the device held by a long job,
# submit token A posts 10,000 jobs: 1000 are queued (the default
# --max-queued-per-token) and 9000 get 429; then token B's job is taken.
# About 30 s on a loaded 2-core machine: labelled long.
set -u
: "${EBB:?}" "${EBB_BUILD_DIR:?}"
. "$(dirname "${BASH_SOURCE[0]}")/../lib/server.sh"
. "$(dirname "${BASH_SOURCE[0]}")/../lib/fair.sh"

serve "$T/s5.log" --config "$T/cfg.json" --data-dir "$T/d5" --input-dir "$T" --token-file "$T/tokens" \
  --no-cache
hold "$T/s5.log"
python3 - "$URL" "$A" "$B" "$T/input.txt" > "$T/flood.out" 2>&1 <<'PY' || fail "the flood: $(tail -5 "$T/flood.out")"
import http.client, json, sys, time
url, a, b, inp = sys.argv[1:5]
host, port = url.split("//")[1].split(":")
conn = http.client.HTTPConnection(host, int(port), timeout=30)
def post(tok):
    body = json.dumps({"pipeline": "syn", "input": inp})
    conn.request("POST", "/v1/jobs", body, {"Authorization": "Bearer " + tok,
                                             "Content-Type": "application/json"})
    r = conn.getresponse(); data = r.read()
    return r.status, data
t0 = time.time(); counts = {}
for i in range(10000):
    st, data = post(a)
    counts[st] = counts.get(st, 0) + 1
st, data = post(b)
print("A's 10,000 jobs: %s in %.1f s; then B: %d %s" % (counts, time.time() - t0, st, data[:120]))
sys.exit(0 if st == 202 and counts.get(202) == 1000 and counts.get(429) == 9000 else 1)
PY
cat "$T/flood.out"
stop_server || fail "server 5 did not stop cleanly"

[ "$fails" = 0 ] && echo "server_fair_flood: all checks passed"
exit $((fails > 0))
