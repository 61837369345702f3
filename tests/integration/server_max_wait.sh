#!/usr/bin/env bash
# ebb serve --max-wait on two fake devices of 8 GiB: pipeline A is loaded on
# one device and busy with a long job; a second A job waits behind it while a
# stream of short B jobs keeps the other device (where B is loaded) busy. A
# device where a pipeline is loaded is where its jobs go, so without
# --max-wait the second A job waits for the long one, however long that is.
#   1. --max-wait 1: once the second A job has waited 1 s it takes the next
#      device that can fit it (B's, evicting B there) and starts before the
#      long job ends.
#   2. control, --max-wait 600, same jobs: it runs after the long job, on
#      the same device (so phase 1 shows --max-wait at work, not chance).
set -u
. "$(dirname "$0")/../lib/server.sh"
if [ "${EBB_TEST_SLOWDOWN:-1}" -gt 1 ]; then # sanitizers: the same proportions, smaller
  DEV=2048 W=1100 EXP=1229
else
  DEV=8192 W=4400 EXP=4915
fi
export FAKEGPU_MEMORY_MIB=$DEV,$DEV FAKEGPU_CONTEXT_MIB=300
cat > "$T/cfg.json" <<JSON
{"pipelines": {
  "A": {"expected_mib": $EXP, "stages": [{"stage": "synthetic", "name": "a", "cache": false,
        "options": {"weights_mib": $W, "activations_mib": 0, "run_ms": 3000, "touch": "sample"}}]},
  "B": {"expected_mib": $EXP, "stages": [{"stage": "synthetic", "name": "b", "cache": false,
        "options": {"weights_mib": $W, "activations_mib": 0, "run_ms": 300, "touch": "sample"}}]}}}
JSON
echo "any input" > "$T/input.txt"

# One run: A (long), B, A (the waiter), then 8 more B; prints
# "DEVICE_OF_A1 DEVICE_OF_A2 A2_STARTED A1_FINISHED".
run() { # MAX_WAIT TAG
  local log=$T/log$2
  rm -rf "$T/data" "$FAKEGPU_STATE"
  serve "$log" --config "$T/cfg.json" --data-dir "$T/data" --input-dir "$T" --devices all --max-wait "$1"
  python3 - "$URL" "$T/input.txt" > "$T/ids$2" <<'PY' || fail "max-wait $1: the jobs did not all succeed: $(cat "$T/ids$2")"
import json, sys, time, urllib.request
url, inp = sys.argv[1], sys.argv[2]
def post(p):
    r = urllib.request.Request(url + "/v1/jobs", json.dumps({"pipeline": p, "input": inp}).encode(),
                               {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(r, timeout=10))["id"]
ids = [post("A"), post("B")]
time.sleep(0.3)  # A and B are on their devices: the waiter comes next
ids.append(post("A"))
ids += [post("B") for _ in range(8)]
for _ in range(1200):  # bounded: 120 s (sanitizer builds are slow)
    jobs = [json.load(urllib.request.urlopen(url + "/v1/jobs/" + i, timeout=10)) for i in ids]
    if all(j["state"] not in ("queued", "running") for j in jobs):
        break
    time.sleep(0.1)
bad = [(j["id"], j["state"], j.get("error")) for j in jobs if j["state"] != "succeeded"]
print("%r %r" % (jobs[2]["started"], jobs[0]["finished"]))
sys.exit(1 if bad else 0)
PY
  stop_server
  # jobs are numbered 1, 2, 3 ... in the order they came (a fresh data dir)
  local d1 d3
  d1=$(sed -n "s/^\[server\] job 1: running pipeline 'A' on //p" "$log")
  d3=$(sed -n "s/^\[server\] job 3: running pipeline 'A' on //p" "$log")
  echo "$d1 $d3 $(tail -1 "$T/ids$2")"
}

read -r a1 a2 started finished < <(run 1 1)
echo "max-wait 1: the long A job on $a1, the waiting one on $a2 (started $started, the long one finished $finished)"
[ -n "$a1" ] && [ -n "$a2" ] || fail "max-wait 1: no 'running' lines for the A jobs: $(cat "$T/log1")"
[ "$a1" != "$a2" ] || fail "max-wait 1: the waiting A job ran on $a2 behind the long one instead of taking the other device"
# (a job's "finished" is when its end was written: a few ms after it ended)
python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) - 0.5 else 1)' "$started" "$finished" 2>/dev/null ||
  fail "max-wait 1: the waiting A job started at $started, not well before the long one ended ($finished)"
grep -qi 'out of memory\|EBB_EOOM' "$T/log1" && fail "max-wait 1: out of memory in the log"

read -r a1 a2 started finished < <(run 600 2)
echo "max-wait 600: the long A job on $a1, the waiting one on $a2 (started $started, the long one finished $finished)"
[ -n "$a1" ] && [ "$a1" = "$a2" ] ||
  fail "max-wait 600 (control): the waiting A job ran on '$a2', not behind the long one on '$a1'"
python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) > float(sys.argv[2]) - 0.5 else 1)' "$started" "$finished" 2>/dev/null ||
  fail "max-wait 600 (control): the waiting A job started at $started, before the long one ended ($finished)"

[ $fails = 0 ] && echo "server_max_wait: all checks passed"
exit $((fails > 0))
