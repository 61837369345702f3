#!/usr/bin/env bash
# ebb serve with several devices gives an idle pipeline back (--keep-resident):
#   1. a job loads A (release policy after-stage): A stays resident after the
#      job; once idle longer than --keep-resident with no job of it queued it
#      is unloaded, the log says so with the bytes, and fakegpu-smi shows the
#      server at 0 MiB on every device (the idle server holds nothing);
#   2. S has "release": "sleep:1": one second after its job it goes asleep
#      (not unloaded), a second job wakes it in place without a load, and it
#      goes asleep again afterwards;
#   3. a pipeline loaded through the API (POST .../load) is left alone;
#   4. a bad --keep-resident exits 2 naming it.
# One path for any number of devices: EBB_TEST_DEVICES (default 2) fake
# devices of 2 GiB; ctest runs it with 1, 2 and 4 (tests/CMakeLists.txt).
set -u
. "$(dirname "$0")/../lib/server.sh"
NDEV=${EBB_TEST_DEVICES:-2}
export FAKEGPU_DEVICES=$NDEV FAKEGPU_MEMORY_MIB=$(printf '2048%.0s,' $(seq "$NDEV") | sed 's/,$//') FAKEGPU_CONTEXT_MIB=300
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {
  "A": {"stages": [{"stage": "synthetic", "name": "a", "cache": false,
        "options": {"weights_mib": 256, "activations_mib": 32, "run_ms": 50}}]},
  "S": {"release": "sleep:1", "stages": [{"stage": "synthetic", "name": "s", "cache": false,
        "options": {"weights_mib": 256, "activations_mib": 32, "run_ms": 50}}]}}}
JSON
echo "any input" > "$T/input.txt"

"$EBB" serve --config "$T/cfg.json" --listen 127.0.0.1:0 --keep-resident x > "$T/bad.out" 2>&1
rc=$?
[ $rc = 2 ] || fail "--keep-resident x: exit $rc, expected 2"
grep -q -- "--keep-resident x" "$T/bad.out" || fail "--keep-resident x: the error does not name it: $(cat "$T/bad.out")"

serve "$T/log" --config "$T/cfg.json" --data-dir "$T/data" --input-dir "$T" \
  --devices all --keep-resident 2

job() { # PIPELINE: runs one job to its end (bounded: 60 s), prints its state
  python3 - "$URL" "$1" "$T/input.txt" <<'PY'
import json, sys, time, urllib.request
url, p, inp = sys.argv[1:4]
r = urllib.request.Request(url + "/v1/jobs", json.dumps({"pipeline": p, "input": inp}).encode(),
                           {"Content-Type": "application/json"})
i = json.load(urllib.request.urlopen(r, timeout=10))["id"]
for _ in range(600):
    st = json.load(urllib.request.urlopen(url + "/v1/jobs/" + i, timeout=10))["state"]
    if st not in ("queued", "running"):
        break
    time.sleep(0.1)
print(st)
PY
}
state() { # PIPELINE: "loaded", "asleep" or "unloaded" per /v1/pipelines
  python3 - "$URL" "$1" <<'PY'
import json, sys, urllib.request
url, name = sys.argv[1:3]
d = json.load(urllib.request.urlopen(url + "/v1/pipelines", timeout=10))
rows = d["pipelines"] if isinstance(d, dict) else d
p = [x for x in rows if x["name"] == name][0]
print("asleep" if p.get("asleep") else "loaded" if p.get("loaded") else "unloaded")
PY
}
wait_state() { # PIPELINE STATE: bounded 20 s
  for _ in $(seq 200); do [ "$(state "$1")" = "$2" ] && return 0; sleep 0.1; done
  return 1
}
smi_total() { # MiB the server holds over all its devices per fakegpu-smi
  local s=0 d m
  for d in $(seq 0 $((NDEV - 1))); do
    m=$("$FAKEGPU_SMI" --id="$d" --query-compute-apps=pid,used_memory --format=csv,noheader,nounits |
      awk -F', *' -v p="$SERVER" '$1 == p {s += $2} END {print s + 0}')
    s=$((s + m))
  done
  echo $s
}

# --- 1. A: resident after its job, unloaded once idle ---------------------------
[ "$(job A)" = succeeded ] || fail "job A did not succeed"
[ "$(state A)" = loaded ] || fail "A is not resident right after its job: $(state A)"
[ "$(smi_total)" -gt 0 ] || fail "fakegpu-smi shows nothing held while A is resident"
wait_state A unloaded || fail "A still $(state A) 20 s after its job (--keep-resident 2)"
wait_log "$T/log" "pipeline A on cuda:[01]: idle [0-9]* s with no job of it queued: unloaded, [1-9][0-9]* MiB released" ||
  fail "no residency unload line for A: $(grep 'pipeline A' "$T/log")"
for _ in $(seq 50); do [ "$(smi_total)" = 0 ] && break; sleep 0.1; done
[ "$(smi_total)" = 0 ] || fail "after A's unload fakegpu-smi shows the server holding $(smi_total) MiB"

# --- 2. S: asleep after a second, woken in place by a job -----------------------
[ "$(job S)" = succeeded ] || fail "first job S did not succeed"
wait_state S asleep || fail "S is $(state S), not asleep, 20 s after its job (sleep:1)"
wait_log "$T/log" "pipeline S on cuda:[01]: idle [0-9]* s with no job of it queued: asleep" ||
  fail "no residency sleep line for S"
loads_before=$(grep -c 'GPU memory free after load' "$T/log")
[ "$(job S)" = succeeded ] || fail "second job S (a wake) did not succeed"
loads_after=$(grep -c 'GPU memory free after load' "$T/log")
[ "$loads_after" = "$loads_before" ] || fail "the second S job loaded S again instead of waking it"
for _ in $(seq 200); do
  [ "$(grep -c 'pipeline S on cuda:[01]: idle .*: asleep' "$T/log")" -ge 2 ] && break
  sleep 0.1
done
[ "$(grep -c 'pipeline S on cuda:[01]: idle .*: asleep' "$T/log")" -ge 2 ] ||
  fail "S did not go asleep again after its second job"

# --- 3. loaded through the API: left alone -----------------------------------------
code=$(curl -s -o "$T/load.out" -w '%{http_code}' -X POST "$URL/v1/pipelines/A/load")
[ "$code" = 200 ] || fail "POST /v1/pipelines/A/load: $code $(cat "$T/load.out")"
sleep 4
[ "$(state A)" = loaded ] || fail "A loaded through the API was released by residency: $(state A)"

stop_server; rc=$?
[ $rc = 0 ] || fail "server exited $rc after SIGTERM"
if [ "$fails" != 0 ]; then
  echo "--- server log"; cat "$T/log"
  exit 1
fi
echo "server_resident: ok"
