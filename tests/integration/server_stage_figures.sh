#!/usr/bin/env bash
# A job's per-stage figures come from the runner's result (pl_job_result):
# a pipeline of an isolated stage `w` (its memory is its worker's, never in
# the server's ledger) and an in-process stage `p`. The store's stages
# (GET /v1/jobs/ID) keep their fields (name, released_bytes: no more) and
# equal the stages' release events; the stream's final `job` event has both
# stages' peaks: p's owner's, and w's as the runner read it from the worker
# (on the old code, read from the server's ledger alone, w's was null).
set -u
. "$(dirname "$0")/../lib/server.sh"
export FAKEGPU_MEMORY_MIB=4096 FAKEGPU_CONTEXT_MIB=300
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {"mix": {"stages": [
  {"stage": "synthetic", "name": "w", "isolate": true, "cache": false,
   "options": {"weights_mib": 96, "activations_mib": 32}},
  {"stage": "synthetic", "name": "p", "cache": false,
   "options": {"weights_mib": 64, "activations_mib": 16}}]}}}
JSON
echo "any input" > "$T/input.txt"
serve "$T/log" --config "$T/cfg.json" --data-dir "$T/data" --input-dir "$T"

timeout 30 curl -sN "$URL/v1/events" > "$T/events.txt" 2>/dev/null &
CURL=$!
sleep 0.5 # the stream's hello first
req POST /v1/jobs -d "{\"pipeline\": \"mix\", \"input\": \"$T/input.txt\"}"
[ "$CODE" = 202 ] || fail "POST /v1/jobs: $CODE $BODY"
ID=$(jget "$BODY" '["id"]')
wait_done "$ID"
[ "$STATE" = succeeded ] || fail "job $ID: $STATE $BODY"
req GET "/v1/jobs/$ID"
JOB=$BODY
for _ in $(seq 50); do # the job's end reaches the stream within a tick or two
  grep -q "\"state\":\"succeeded\"" "$T/events.txt" && break
  sleep 0.1
done
sleep 0.6
kill "$CURL" 2>/dev/null; wait "$CURL" 2>/dev/null

python3 - "$JOB" "$T/events.txt" "$ID" <<'PY' || fails=$((fails + 1))
import json, sys
job, path, jid = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
evs = []
for block in open(path, errors="replace").read().split("\n\n"):
    name = data = None
    for line in block.split("\n"):
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            data = json.loads(line[6:])
    if name and data is not None:
        evs.append((name, data))
bad = []
stored = job.get("stages") or []
if [s.get("name") for s in stored] != ["w", "p"]:
    bad.append("the store's stages are %s, expected w then p" % stored)
for s in stored:
    if sorted(s) != ["name", "released_bytes"]:
        bad.append("the store's stage %s has fields %s, not name and released_bytes" % (
            s.get("name"), sorted(s)))
rel = {}
for n, d in evs:
    if n == "release" and not d.get("asleep") and d.get("stage") in ("w", "p"):
        rel[d["stage"]] = rel.get(d["stage"], 0) + d["bytes"]
for s in stored:
    if s.get("released_bytes") != rel.get(s.get("name"), 0):
        bad.append("stage %s: the store says %s bytes released, its release events %s" % (
            s.get("name"), s.get("released_bytes"), rel.get(s.get("name"), 0)))
if not stored or stored[-1].get("released_bytes", 0) < 80 << 20:
    bad.append("stage p released less than its weights and activations: %s" % stored)
done = [d for n, d in evs if n == "job" and d.get("id") == jid and d.get("state") == "succeeded"]
if not done:
    bad.append("no `job` event saying job %s succeeded" % jid)
else:
    peaks = {s["name"]: s.get("peak_bytes") for s in done[-1]["stages"]}
    for name, mib in (("w", 96 + 32), ("p", 64 + 16)):
        if not isinstance(peaks.get(name), int) or peaks[name] < mib << 20:
            bad.append("the final job event: stage %s peak_bytes %s, expected at least %d MiB" % (
                name, peaks.get(name), mib))
for b in bad:
    print("FAIL: " + b)
if not bad:
    print("ok: the store's stages (name, released_bytes) equal the release events; "
          "the job event has the isolated and the in-process stage's peaks")
sys.exit(1 if bad else 0)
PY
stop_server; rc=$?
[ "$rc" = 0 ] || fail "ebb serve exited $rc on SIGTERM"
if [ "$fails" -ne 0 ]; then echo "--- server log"; cat "$T/log"; exit 1; fi
echo "server_stage_figures: all checks passed"
