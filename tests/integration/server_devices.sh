#!/usr/bin/env bash
# ebb serve --devices on four fake devices of 8 GiB (context 300 MiB) with two
# pipelines that need ~60 % of a device each (4400 MiB of weights + 200 MiB
# of activations + the context; two never fit on one device):
#   1. 12 jobs alternating A/B (run_ms 800): all succeed, every device runs
#      jobs, at most 6 loads (pipelines stay resident where they are used), no
#      out-of-memory; /v1/memory and /metrics show the four devices (a device
#      label on every device series; promtool when installed); fakegpu-smi
#      --id=N shows the server holding one pipeline on each device, and
#      nothing on any device after SIGTERM (every release confirmed per device);
#      unloading A empties both its devices (fakegpu-smi --id), loading it
#      again places it on one of them and the answer names the device; a
#      session on B opens on a device where B is loaded and runs an item.
#   2. a process holding 7 GiB of device 2 (fakegpu-hold): nothing runs on
#      cuda:2; once the hold ends, cuda:2 is used again.
#   3. device 3 lost while a job runs there (fakegpu-smi --fake-lose-device):
#      that job fails naming cuda:3, every other job completes on 0-2, cuda:3
#      shows as failed in /v1/memory and /metrics with nothing loaded (its
#      pipeline unloaded when it failed), the server stays up.
# The makespan of phase 1 is printed (bench/ measures throughput: make bench).
set -u
: "${EBB_BUILD_DIR:?}"
. "$(dirname "$0")/../lib/server.sh"
HOLD=$EBB_BUILD_DIR/fakegpu/fakegpu-hold
# Sanitizer builds poison every freed byte of device memory (slow on the fake):
# there the same proportions at a quarter of the size.
if [ "${EBB_TEST_SLOWDOWN:-1}" -gt 1 ]; then
  DEV=2048 W=1100 ACT=50 EXP=1229 HOLD_MIB=1536 LO=1350 HI=1500
else
  DEV=8192 W=4400 ACT=200 EXP=4915 HOLD_MIB=7168 LO=4600 HI=5000
fi
export FAKEGPU_MEMORY_MIB=$DEV,$DEV,$DEV,$DEV FAKEGPU_CONTEXT_MIB=300
HOLDER=
trap '{ [ -n "$HOLDER" ] && kill "$HOLDER"; stop_server; } >/dev/null 2>&1 || true' EXIT
pipes() { # RUN_MS
  cat <<JSON
{"pipelines": {
  "A": {"expected_mib": $EXP, "stages": [{"stage": "synthetic", "name": "a", "cache": false,
        "options": {"weights_mib": $W, "activations_mib": $ACT, "run_ms": $1, "touch": "sample"}}]},
  "B": {"expected_mib": $EXP, "stages": [{"stage": "synthetic", "name": "b", "cache": false,
        "options": {"weights_mib": $W, "activations_mib": $ACT, "run_ms": $1, "touch": "sample"}}]}}}
JSON
}
pipes 800 > "$T/cfg.json"
pipes 3000 > "$T/cfg_long.json" # long enough that cuda:3 is lost mid-run even under a loaded machine
echo "any input" > "$T/input.txt"

start() { # CONFIG LOG [more serve args]
  local cfg=$1; LOG=$2; shift 2
  serve "$LOG" --config "$cfg" --data-dir "$T/data" --input-dir "$T" --devices all "$@"
}
stop() {
  stop_server; local rc=$?
  [ $rc = 0 ] || fail "server exited $rc after SIGTERM"
}
IDS=()
submit() { # N: N jobs alternating A, B (one client, so they arrive close together)
  local out
  out=$(python3 - "$URL" "$1" "$T/input.txt" <<'PY'
import json, sys, urllib.request
url, n, inp = sys.argv[1], int(sys.argv[2]), sys.argv[3]
for i in range(n):
    body = json.dumps({"pipeline": "AB"[i % 2], "input": inp}).encode()
    r = urllib.request.Request(url + "/v1/jobs", body, {"Content-Type": "application/json"})
    print(json.load(urllib.request.urlopen(r, timeout=10))["id"])
PY
) || fail "submitting $1 jobs failed"
  IDS+=($out)
}
wait_all() { # every job in IDS finished (bounded: 90 s); STATES: "id state error" lines
  STATES=$(python3 - "$URL" "${IDS[@]}" <<'PY'
import json, sys, time, urllib.request
url, ids = sys.argv[1], sys.argv[2:]
for _ in range(900):
    rows = []
    for i in ids:
        d = json.load(urllib.request.urlopen(url + "/v1/jobs/" + i, timeout=10))
        e = d.get("error") or {}
        rows.append((i, d["state"], (e.get("message") if isinstance(e, dict) else e) or ""))
    if all(r[1] not in ("queued", "running") for r in rows):
        break
    time.sleep(0.1)
for r in rows:
    print(*r)
PY
)
  grep -q ' queued\| running' <<<"$STATES" && fail "jobs still unfinished after 90 s: $STATES"
}
smi_server_mib() { # DEVICE: MiB this server holds there per fakegpu-smi --id
  "$FAKEGPU_SMI" --id="$1" --query-compute-apps=pid,used_memory --format=csv,noheader,nounits |
    awk -F', *' -v p="$SERVER_PID" '$1 == p {s += $2} END {print s + 0}'
}

# --- bad --devices: exit 2 naming what was wrong ----------------------------------
bad_devices() { # WHAT ARGS...
  local what=$1; shift
  "$EBB" serve --listen 127.0.0.1:0 --data-dir "$T/bad" "$@" > "$T/bad.out" 2>&1
  local rc=$?
  [ $rc = 2 ] || fail "serve $*: exit $rc, expected 2 ($(cat "$T/bad.out"))"
  grep -q -- "$what" "$T/bad.out" || fail "serve $*: the error does not name '$what': $(cat "$T/bad.out")"
}
bad_devices "'gpu1' is not all, cpu or cuda:N" --devices cuda:0,gpu1
bad_devices "'cuda:1' is named twice" --devices cuda:1,cuda:1
bad_devices "cuda:7" --devices cuda:0,cuda:7
bad_devices "not both" --devices all --device cuda:0

# --- 1. the workload -------------------------------------------------------------
start "$T/cfg.json" "$T/log1"
SERVER_PID=$SERVER
t0=$(date +%s.%N)
submit 12
wait_all
t1=$(date +%s.%N)
echo "phase 1: 12 jobs x 800 ms on 4 devices in $(echo "$t1 - $t0" | bc) s (ideal 2.4 s + the loads)"
ok=$(grep -c ' succeeded' <<<"$STATES")
[ "$ok" = 12 ] || fail "phase 1: $ok of 12 jobs succeeded: $STATES"
for d in 0 1 2 3; do
  grep -q "running pipeline '.' on cuda:$d\$" "$T/log1" || fail "phase 1: no job ran on cuda:$d"
done
loads=$(grep -c 'GPU memory free after load' "$T/log1")
[ "$loads" -le 6 ] || fail "phase 1: $loads loads (expected at most 6: pipelines stay resident)"
echo "phase 1: $loads loads"
grep -qi 'out of memory\|EBB_EOOM' "$T/log1" && fail "phase 1: out of memory in the log"
mem=$(curl -s "$URL/v1/memory")
python3 - "$mem" <<'PY' || fail "phase 1: /v1/memory does not show four devices each with one pipeline"
import json, sys
d = json.loads(sys.argv[1])
devs = d["devices"]
assert [x["label"] for x in devs] == ["cuda:0", "cuda:1", "cuda:2", "cuda:3"], devs
for x in devs:
    assert x["state"] == "idle" and len(x["loaded"]) == 1, x
assert sorted(sum((x["loaded"] for x in devs), [])) == ["A", "A", "B", "B"], devs
PY
curl -s "$URL/metrics" > "$T/metrics.txt"
for d in 0 1 2 3; do
  for s in ebb_device_reserved_bytes ebb_device_free_bytes ebb_context_held ebb_device_failed; do
    grep -q "^$s{device=\"cuda:$d\"} " "$T/metrics.txt" || fail "/metrics: no $s for cuda:$d"
  done
done
if command -v promtool >/dev/null; then
  promtool check metrics < "$T/metrics.txt" > "$T/promtool.out" 2>&1 ||
    fail "promtool check metrics: $(cat "$T/promtool.out")"
else
  echo "note: promtool is not installed; /metrics checked by grep only"
fi
for d in 0 1 2 3; do
  mib=$(smi_server_mib $d)
  [ "$mib" -ge "$LO" ] && [ "$mib" -le "$HI" ] ||
    fail "phase 1: fakegpu-smi --id=$d: the server holds $mib MiB (expected one resident pipeline, ~4900)"
done
# unload A: gone from both its devices, confirmed per device by fakegpu-smi
adevs=$(python3 -c '
import json, sys
print(" ".join(x["label"][5:] for x in json.loads(sys.argv[1])["devices"] if "A" in x["loaded"]))' "$mem")
code=$(curl -s -o "$T/unload.json" -w '%{http_code}' -X POST "$URL/v1/pipelines/A/unload")
[ "$code" = 200 ] || fail "unload A: $code $(cat "$T/unload.json")"
for d in $adevs; do
  [ "$(smi_server_mib "$d")" = 0 ] || fail "after unloading A: fakegpu-smi --id=$d still shows the server"
done
# load A again: placed on an empty device, which the answer names
code=$(curl -s -o "$T/load.json" -w '%{http_code}' -X POST "$URL/v1/pipelines/A/load")
ldev=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["device"])' "$T/load.json" 2>/dev/null)
[ "$code" = 200 ] && [ -n "$ldev" ] || fail "load A: $code $(cat "$T/load.json")"
case " $adevs " in *" ${ldev#cuda:} "*) ;; *) fail "load A went to $ldev, not to one of the emptied devices ($adevs)" ;; esac
[ "$(smi_server_mib "${ldev#cuda:}")" -ge "$LO" ] || fail "load A: fakegpu-smi --id=${ldev#cuda:} does not show it"
# a session on B opens where B is loaded (no load) and runs items there
bdevs=$(python3 -c '
import json, sys
print(" ".join(x["label"] for x in json.loads(sys.argv[1])["devices"] if "B" in x["loaded"]))' "$mem")
loads_before=$(grep -c 'GPU memory free after load' "$T/log1")
sess=$(curl -s -X POST "$URL/v1/sessions" -H 'Content-Type: application/json' -d '{"pipeline": "B"}')
sid=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["id"])' "$sess" 2>/dev/null)
sdev=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["device"])' "$sess" 2>/dev/null)
case " $bdevs " in *" $sdev "*) ;; *) fail "session on B opened on '$sdev', not where B is loaded ($bdevs): $sess" ;; esac
item=$(curl -s -X POST "$URL/v1/sessions/$sid/items" -H 'Content-Type: application/json' \
  -d "{\"input\": \"$T/input.txt\"}")
case $item in *'"state": "succeeded"'*|*'"state":"succeeded"'*) ;; *) fail "session item on B: $item" ;; esac
[ "$(grep -c 'GPU memory free after load' "$T/log1")" = "$loads_before" ] ||
  fail "the session on B loaded it again"
code=$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "$URL/v1/sessions/$sid")
[ "$code" = 200 ] || fail "closing the session on $sdev: $code"
stop
for d in 0 1 2 3; do
  used=$("$FAKEGPU_SMI" --id=$d --query-gpu=memory.used --format=csv,noheader,nounits)
  [ "$used" = 0 ] || fail "after SIGTERM: fakegpu-smi --id=$d shows $used MiB used"
done
grep -q 'stopped cuda:3: 0 MiB reserved, context released' "$T/log1" ||
  fail "phase 1: no release line for cuda:3 at stop"

# --- 2. another process holds 7 GiB of device 2 -------------------------------------
"$HOLD" --device 2 --alloc "$HOLD_MIB" --wait < /dev/null > "$T/hold.out" 2>&1 &
HOLDER=$!
for _ in $(seq 100); do
  [ "$("$FAKEGPU_SMI" --id=2 --query-gpu=memory.used --format=csv,noheader,nounits)" -ge "$HOLD_MIB" ] && break
  sleep 0.1
done
[ "$("$FAKEGPU_SMI" --id=2 --query-gpu=memory.used --format=csv,noheader,nounits)" -ge "$HOLD_MIB" ] ||
  fail "phase 2: the hold did not take 7 GiB of device 2"
rm -rf "$T/data"
start "$T/cfg.json" "$T/log2"
SERVER_PID=$SERVER
IDS=()
submit 6
wait_all
ok=$(grep -c ' succeeded' <<<"$STATES")
[ "$ok" = 6 ] || fail "phase 2: $ok of 6 jobs succeeded while device 2 was held: $STATES"
grep -q "running pipeline '.' on cuda:2\$" "$T/log2" && fail "phase 2: a job was placed on cuda:2 while 7 GiB of it were held"
[ "$(smi_server_mib 2)" = 0 ] || fail "phase 2: the server holds memory on the held device 2"
kill "$HOLDER"; wait "$HOLDER" 2>/dev/null; HOLDER=
for _ in $(seq 100); do
  [ "$("$FAKEGPU_SMI" --id=2 --query-gpu=memory.used --format=csv,noheader,nounits)" = 0 ] && break
  sleep 0.1
done
IDS=()
submit 6
wait_all
ok=$(grep -c ' succeeded' <<<"$STATES")
[ "$ok" = 6 ] || fail "phase 2: $ok of 6 jobs succeeded after the hold ended: $STATES"
grep -q "running pipeline '.' on cuda:2\$" "$T/log2" || fail "phase 2: cuda:2 was not used again once the hold ended"
stop

# --- 3. device 3 is lost mid-job ---------------------------------------------------
rm -rf "$T/data" "$FAKEGPU_STATE"
start "$T/cfg_long.json" "$T/log3"
SERVER_PID=$SERVER
IDS=()
submit 4
for _ in $(seq 200); do grep -q "running pipeline '.' on cuda:3\$" "$T/log3" && break; sleep 0.05; done
grep -q "running pipeline '.' on cuda:3\$" "$T/log3" || fail "phase 3: no job went to cuda:3"
loaded3() { curl -s "$URL/v1/memory" | python3 -c '
import json, sys
print(len({x["label"]: x for x in json.load(sys.stdin)["devices"]}["cuda:3"]["loaded"]))' 2>/dev/null; }
for _ in $(seq 100); do [ "$(loaded3)" = 1 ] && break; sleep 0.05; done # lost mid-run, not mid-load
[ "$(loaded3)" = 1 ] || fail "phase 3: the job's pipeline never showed as loaded on cuda:3"
"$FAKEGPU_SMI" --fake-lose-device=3 > /dev/null || fail "phase 3: fakegpu-smi --fake-lose-device=3 failed"
submit 4
wait_all
nfail=$(grep -c ' failed ' <<<"$STATES")
ok=$(grep -c ' succeeded' <<<"$STATES")
[ "$nfail" = 1 ] && [ "$ok" = 7 ] || fail "phase 3: expected 1 failed and 7 succeeded: $STATES"
grep ' failed ' <<<"$STATES" | grep -q 'cuda:3' || fail "phase 3: the failed job does not name cuda:3: $STATES"
n3=$(grep -c "running pipeline '.' on cuda:3\$" "$T/log3")
[ "$n3" = 1 ] || fail "phase 3: $n3 jobs ran on cuda:3 (only the one that failed should have)"
mem=$(curl -s "$URL/v1/memory")
python3 -c '
import json, sys
d = {x["label"]: x for x in json.loads(sys.argv[1])["devices"]}
assert d["cuda:3"]["state"] == "failed" and "cuda:3" in d["cuda:3"]["error"], d["cuda:3"]
assert all(d[k]["state"] != "failed" for k in ("cuda:0", "cuda:1", "cuda:2")), d' "$mem" ||
  fail "phase 3: /v1/memory does not show cuda:3 (alone) failed"
# the failed device's pipeline is unloaded when it fails, not at the server's stop
python3 -c '
import json, sys
d = {x["label"]: x for x in json.loads(sys.argv[1])["devices"]}
assert d["cuda:3"]["loaded"] == [], d["cuda:3"]' "$mem" ||
  fail "phase 3: /v1/memory still shows a pipeline loaded on the failed cuda:3"
grep -q 'device cuda:3 failed: 1 pipeline unloaded there' "$T/log3" ||
  fail "phase 3: no line saying cuda:3's pipeline was unloaded when it failed: $(grep cuda:3 "$T/log3")"
curl -s "$URL/metrics" | grep -q '^ebb_device_failed{device="cuda:3"} 1$' ||
  fail "phase 3: /metrics does not show cuda:3 failed"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/healthz")" = 200 ] || fail "phase 3: /healthz after the failure"
stop

[ $fails = 0 ] && echo "server_devices: all checks passed"
exit $((fails > 0))
