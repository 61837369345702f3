#!/usr/bin/env bash
# SCALE-OUT ON REDIS (docs/scale-out.md). A real redis-server (appendonly,
# fsync always) on a free loopback port in a temp dir, and three `ebb serve
# --queue` nodes, each with its own fake GPU (FAKEGPU_STATE), as separate
# machines would have:
#  1. 60 jobs across two pipelines, submitted round-robin to the nodes, all
#     complete exactly once (one attempt, one result write), any node
#     answers for any job, every node ran some; every release line of each
#     node matches the drop its own fakegpu-smi measured; an input over
#     the inline limit travels through --shared-dir by content hash;
#     GET /v1/cluster lists the three nodes with devices and free memory;
#     /metrics labels every series with the node (promtool passes).
#  2. a node SIGKILLed mid-job: every job completes, the dead node's job is
#     rerun elsewhere within lease + 5 s (attempt 2, the first attempt's
#     cause recorded), no result written twice.
#  3. Redis SIGKILLed mid-run and restarted: submissions meanwhile get 503,
#     no acknowledged job is lost, the nodes resume without a restart.
#  4. the nodes stopped with SIGTERM mid-job: exit 0, the jobs queued again.
set -u
: "${EBB:?}" "${FAKEGPU_SMI:?}"
. "$(dirname "$0")/../lib/cluster.sh"
mkdir -p "$T/shared"
export FAKEGPU_MEMORY_MIB=4096 FAKEGPU_CONTEXT_MIB=300
LEASE=3
start_redis --appendonly yes --appendfsync always

cat > "$T/cfg.json" <<'JSON'
{"pipelines": {
  "P": {"stages": [{"stage": "synthetic", "name": "p1",
                    "options": {"weights_mib": 48, "activations_mib": 16, "run_ms": 100}},
                   {"stage": "synthetic", "name": "p2",
                    "options": {"weights_mib": 24, "run_ms": 30}}]},
  "Q": {"stages": [{"stage": "synthetic", "name": "q1",
                    "options": {"weights_mib": 64, "activations_mib": 8, "run_ms": 100}}]},
  "slow": {"stages": [{"stage": "synthetic", "name": "s1",
                       "options": {"weights_mib": 32, "run_ms": 8000}}]},
  "big": {"stages": [{"stage": "synthetic", "name": "b1",
                      "options": {"weights_mib": 1024, "run_ms": 60000}}]}}}
JSON
echo "small input" > "$T/input.txt"
head -c 4096 /dev/urandom > "$T/big.bin"

start_node() { # name [extra flags]
  local n=$1; shift
  FAKEGPU_STATE="$T/gpu-$n" HOOK_LOG="$T/hook-$n.log" HOOK_EVENTS='before-release after-stage' \
    EBB_STAGE_HOOK="sh $SMI_HOOK" \
    "$EBB" serve --config "$T/cfg.json" --listen 127.0.0.1:0 --data-dir "$T/data-$n" \
    --input-dir "$T" --no-cache --queue "redis://127.0.0.1:$PORT/0" --queue-prefix t \
    --node-id "$n" --lease "$LEASE" --shared-dir "$T/shared" "$@" > "$T/log-$n" 2>&1 &
  NPID[$n]=$!
  node_up "$n"
}
start_node n1
start_node n2
start_node n3 --inline-max-mib 0.001   # 1 KiB: big.bin goes through the shared dir
NODES=(n1 n2 n3)

submit() { # node pipeline file -> prints the id (or CODE:body)
  local out code
  out=$(curl -s -w '\n%{http_code}' -X POST "${URL[$1]}/v1/jobs" -H 'Content-Type: application/json' \
        -d "{\"pipeline\": \"$2\", \"input\": \"$3\"}")
  code=${out##*$'\n'}; out=${out%$'\n'*}
  if [ "$code" = 202 ]; then jget "$out" '["id"]'; else echo "ERR:$code:$out"; fi
}
# every id in file $1 ended: prints "done" when all have, via any node
wait_all() { # idsfile seconds
  python3 - "$1" "$2" "${URL[n1]}" "${URL[n2]}" "${URL[n3]}" <<'PY'
import json, sys, time, urllib.request
ids = [l.strip() for l in open(sys.argv[1]) if l.strip()]
urls = sys.argv[3:]
deadline = time.time() + float(sys.argv[2])
left = set(ids)
while left and time.time() < deadline:
    for i, uid in enumerate(sorted(left)):
        for u in urls[i % 3:] + urls[:i % 3]:
            try:
                j = json.load(urllib.request.urlopen(u + "/v1/jobs/" + uid, timeout=2))
            except Exception:
                continue
            if j["state"] in ("succeeded", "failed", "cancelled"):
                left.discard(uid)
            break
    time.sleep(0.3)
print("done" if not left else "left %d: %s" % (len(left), " ".join(sorted(left)[:5])))
PY
}
# the job objects of the ids in $1 as one JSON list, read from node $2
jobs_json() {
  python3 - "$1" "${URL[$2]}" <<'PY'
import json, sys, urllib.request
out = []
for uid in [l.strip() for l in open(sys.argv[1]) if l.strip()]:
    out.append(json.load(urllib.request.urlopen(sys.argv[2] + "/v1/jobs/" + uid, timeout=5)))
print(json.dumps(out))
PY
}

# bad --queue usage exits 2 naming what was wrong
for args in "--queue http://127.0.0.1:$PORT" "--queue redis://127.0.0.1:notaport" \
            "--queue redis://127.0.0.1:$PORT/99" "--shared-dir $T" "--queue redis://127.0.0.1:$PORT --node-id a/b"; do
  # shellcheck disable=SC2086
  "$EBB" serve --config "$T/cfg.json" --listen 127.0.0.1:0 --data-dir "$T/bad" $args > "$T/bad.out" 2>&1
  rc=$?
  [ "$rc" = 2 ] && grep -qE -- "--queue|--node-id|need --queue" "$T/bad.out" || fail "ebb serve $args: exit $rc, $(head -2 "$T/bad.out")"
done

# TLS: Debian's hiredis 0.14 has none; rediss:// says so
"$EBB" serve --config "$T/cfg.json" --listen 127.0.0.1:0 --data-dir "$T/bad" \
  --queue "rediss://127.0.0.1:$PORT" > "$T/bad.out" 2>&1
rc=$?
[ "$rc" = 2 ] && grep -q "TLS (rediss://) is not supported.*hiredis 0.14" "$T/bad.out" ||
  fail "--queue rediss://: exit $rc, $(head -2 "$T/bad.out") (expected 2 naming the missing TLS)"

# --- 1. 60 jobs, two pipelines, three nodes ---------------------------------------
: > "$T/ids1"
for i in $(seq 0 59); do
  n=${NODES[$((i % 3))]}; p=P; [ $((i % 2)) = 1 ] && p=Q
  id=$(submit "$n" "$p" "$T/input.txt")
  case $id in ERR:*) fail "submit $i to $n: $id" ;; *) echo "$id" >> "$T/ids1" ;; esac
done
BIG=$(submit n3 P "$T/big.bin")
case $BIG in ERR:*) fail "big input to n3: $BIG" ;; *) echo "$BIG" >> "$T/ids1" ;; esac
# an upload (multipart, with options) to n2 travels the same way
out=$(curl -s -w '\n%{http_code}' "${URL[n2]}/v1/jobs" -F pipeline=Q -F 'options={"q1": {"run_ms": 10}}' -F "file=@$T/input.txt")
UP=$(jget "${out%$'\n'*}" '["id"]')
[ "${out##*$'\n'}" = 202 ] && [ -n "$UP" ] && echo "$UP" >> "$T/ids1" || fail "multipart upload to n2: $out"
r=$(wait_all "$T/ids1" 120)
[ "$r" = done ] || fail "phase 1: not every job ended in 120 s: $r"
jobs_json "$T/ids1" n2 > "$T/jobs1.json"
python3 - "$T/jobs1.json" "$BIG" <<'PY' || fail "phase 1 job checks (above)"
import json, sys, collections
jobs = json.load(open(sys.argv[1])); ok = True
per = collections.Counter()
for j in jobs:
    if j["state"] != "succeeded" or j["attempt"] != 1 or j["result_writes"] != 1:
        print("job", j["id"], j["state"], "attempt", j["attempt"], "writes", j["result_writes"], j.get("error")); ok = False
    per[j["node"]] += 1
    if not j["result"] or j["result"].get("where") != "shared" or not j["result"]["files"]:
        print("job", j["id"], "result names no shared outputs:", j["result"]); ok = False
big = [j for j in jobs if j["id"] == sys.argv[2]]
if not big or big[0]["input"]["where"] != "shared" or "/shared/inputs/" not in big[0]["input"]["ref"]:
    print("the 4 KiB input to n3 (1 KiB inline limit) did not travel through the shared dir:", big and big[0]["input"]); ok = False
small = [j for j in jobs if j["id"] != sys.argv[2]]
if any(j["input"]["where"] != "redis" for j in small):
    print("a small input did not travel in Redis"); ok = False
print("phase 1: jobs per node", dict(per), "of", len(jobs))
if len(per) != 3: print("not every node ran jobs:", dict(per)); ok = False
sys.exit(0 if ok else 1)
PY
up=$(curl -s "${URL[n3]}/v1/jobs/$UP")
[ "$(jget "$up" '["options"]["q1"]["run_ms"]')" = 10 ] && [ "$(jget "$up" '["state"]')" = succeeded ] ||
  fail "the upload's job lost its options or failed: $up"
cmp -s "$T/big.bin" "$T/shared/inputs/$(sha256sum "$T/big.bin" | cut -d' ' -f1)" ||
  fail "the shared input is not named by the content's SHA-256"
# every node's release lines against its own fakegpu-smi (the hook's drops)
for n in "${NODES[@]}"; do
  python3 - "$T/hook-$n.log" "$T/log-$n" "$n" <<'PY' || fail "node $n: release lines vs fakegpu-smi (above)"
import re, sys
hook = [l.split() for l in open(sys.argv[1])]
lines = [l for l in open(sys.argv[2]) if re.match(r"^\[\w+\] released \d+ MiB of GPU memory$", l)]
pairs, before = [], {}
for ev, stage, rel, used in hook:
    if ev == "before-release": before[stage] = int(used)
    elif ev == "after-stage" and stage in before:
        pairs.append((stage, int(rel) >> 20, before.pop(stage) - int(used)))
logged = [(m.group(1), int(m.group(2))) for m in (re.match(r"^\[(\w+)\] released (\d+) MiB", l) for l in lines)]
want = [(s, r) for s, r, d in pairs if r > 0]
ok = True
if logged != want:
    print(sys.argv[3], "release lines", logged[:4], "... differ from the hook's", want[:4]); ok = False
bad = [(s, r, d) for s, r, d in pairs if abs(r - d) > 2]
if bad: print(sys.argv[3], "ebb said vs fakegpu-smi dropped (stage, MiB, MiB):", bad[:5]); ok = False
if not pairs: print(sys.argv[3], "no stage ran here"); ok = False
print(sys.argv[3], len(pairs), "stage releases match fakegpu-smi" if ok else "")
sys.exit(0 if ok else 1)
PY
done
C=$(curl -s "${URL[n1]}/v1/cluster")
python3 - "$C" <<'PY' || fail "GET /v1/cluster: $C"
import json, sys
c = json.loads(sys.argv[1])
ids = sorted(n["id"] for n in c["nodes"] if n.get("alive"))
assert ids == ["n1", "n2", "n3"], ids
for n in c["nodes"]:
    d = n["devices"][0]
    assert d["driver_total_bytes"] == 4096 << 20 and "driver_free_bytes" in d, d
    assert isinstance(n["loaded"], list) and n["url"].startswith("http://127.0.0.1:"), n
PY
# /metrics: node="n2" first on every series, and promtool still passes
curl -s "${URL[n2]}/metrics" > "$T/metrics-n2.txt"
grep -q '^ebb_node_info{node="n2"} 1$' "$T/metrics-n2.txt" || fail "/metrics of n2 does not name the node"
grep -q '^ebb_device_free_bytes{node="n2",device="cuda:0"} [0-9]' "$T/metrics-n2.txt" &&
  grep -q '^ebb_sessions{node="n2"} 0$' "$T/metrics-n2.txt" ||
  fail "/metrics of n2: a device series or a label-less one lacks node=\"n2\": $(grep -E '^ebb_(device_free_bytes|sessions)' "$T/metrics-n2.txt")"
unlabelled=$(grep -v '^#' "$T/metrics-n2.txt" | grep -v '^[a-z_:]*{node="n2"[,}]' | head -3)
[ -z "$unlabelled" ] || fail "/metrics of n2: series without node=\"n2\": $unlabelled"
if command -v promtool >/dev/null; then
  promtool check metrics < "$T/metrics-n2.txt" > "$T/promtool.out" 2>&1 ||
    fail "promtool check metrics (n2): $(cat "$T/promtool.out")"
else
  echo "note: promtool is not installed; /metrics of n2 checked by grep only"
fi

# --- 2. a node SIGKILLed mid-job ----------------------------------------------------
: > "$T/ids2"
for i in $(seq 0 3); do
  id=$(submit "${NODES[$((i % 3))]}" slow "$T/input.txt")
  case $id in ERR:*) fail "slow submit: $id" ;; *) echo "$id" >> "$T/ids2" ;; esac
done
# n2's slow job, read from the job records (not the heartbeat, which may be
# a second old), while it has seconds left to run
VICTIM=$(python3 - "$T/ids2" "${URL[n1]}" <<'PY'
import json, sys, time, urllib.request
ids = [l.strip() for l in open(sys.argv[1]) if l.strip()]
end = time.time() + 60
while time.time() < end:
    for uid in ids:
        try:
            j = json.load(urllib.request.urlopen(sys.argv[2] + "/v1/jobs/" + uid, timeout=2))
        except Exception:
            continue
        if j["state"] == "running" and j["node"] == "n2" and time.time() - j["started"] < 5:
            print(uid); sys.exit(0)
    time.sleep(0.05)
PY
)
[ -n "$VICTIM" ] || fail "n2 never ran a slow job with seconds left"
kill -KILL "${NPID[n2]}"; wait "${NPID[n2]}" 2>/dev/null; KILLED=$(date +%s.%N); unset 'NPID[n2]'
echo "killed n2 while it ran $VICTIM"
URL[n2]=${URL[n1]} # its answers now come from n1
r=$(wait_all "$T/ids2" 90)
[ "$r" = done ] || fail "phase 2: not every job ended: $r"
jobs_json "$T/ids2" n3 > "$T/jobs2.json"
python3 - "$T/jobs2.json" "$VICTIM" "$KILLED" "$LEASE" <<'PY' || fail "phase 2 checks (above)"
import json, sys
jobs = json.load(open(sys.argv[1])); victim, killed, lease = sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
ok = True
for j in jobs:
    if j["state"] != "succeeded" or j["result_writes"] != 1:
        print("job", j["id"], j["state"], "writes", j["result_writes"], j.get("error")); ok = False
v = [j for j in jobs if j["id"] == victim][0]
if v["node"] == "n2" or v["attempt"] != 2:
    print("the dead node's job: node", v["node"], "attempt", v["attempt"]); ok = False
if not v["attempts"] or "n2" not in v["attempts"][0]["cause"]:
    print("the first attempt's cause is not recorded:", v["attempts"]); ok = False
# The job can restart once its lease has run out AND a node is free: the
# other slow jobs that were running at the kill hold n1 and n3 until they end
# (8 s jobs: up to 8 s after the kill), so the bound counts from the later of
# the two, not from the kill alone.
busy = [j["finished"] for j in jobs if j["id"] != victim and j.get("started") and
        j.get("finished") and j["started"] <= killed < j["finished"]]
ready = max([killed + lease] + ([min(busy)] if busy else []))
delay = v["started"] - killed
print("the dead node's job restarted on %s %.1f s after the kill (lease %.0f s; a node was free "
      "%.1f s after the kill)" % (v["node"], delay, lease, ready - killed))
if v["started"] > ready + 5: print("rerun later than 5 s after the lease ran out with a node free"); ok = False
sys.exit(0 if ok else 1)
PY
for n in n1 n3; do grep "job $VICTIM" "$T/log-$n"; done

# --- 3. Redis SIGKILLed mid-run and restarted --------------------------------------
: > "$T/ids3"
for i in $(seq 0 17); do
  n=n1; [ $((i % 2)) = 1 ] && n=n3; p=P; [ $((i % 3)) = 0 ] && p=Q
  id=$(submit "$n" "$p" "$T/input.txt")
  case $id in ERR:*) fail "submit before the outage: $id" ;; *) echo "$id" >> "$T/ids3" ;; esac
done
sleep 1
kill -KILL "$RPID"; wait "$RPID" 2>/dev/null; RPID=
sleep 1
r=$(submit n1 P "$T/input.txt")
case $r in ERR:503:*queue_unavailable*) echo "during the outage: 503 as expected" ;; *) fail "submit while Redis is down: $r (expected 503 queue_unavailable)" ;; esac
sleep 2
start_redis --appendonly yes --appendfsync always
r=$(wait_all "$T/ids3" 90)
[ "$r" = done ] || fail "phase 3: acknowledged jobs did not all end after Redis came back: $r"
jobs_json "$T/ids3" n1 > "$T/jobs3.json"
python3 - "$T/jobs3.json" <<'PY' || fail "phase 3 checks (above)"
import json, sys
jobs = json.load(open(sys.argv[1])); ok = len(jobs) == 18
for j in jobs:
    if j["state"] != "succeeded" or j["result_writes"] != 1:
        print("job", j["id"], j["state"], "writes", j["result_writes"], j.get("error"), j["attempts"]); ok = False
print("phase 3:", len(jobs), "jobs acknowledged before the outage; states",
      sorted(set(j["state"] for j in jobs)))
sys.exit(0 if ok else 1)
PY
id=$(submit n3 Q "$T/input.txt")
case $id in ERR:*) fail "submit after Redis came back: $id" ;; esac
for n in n1 n3; do kill -0 "${NPID[$n]}" 2>/dev/null || fail "node $n died during the outage"; done
for n in n1 n3; do
  grep -q "lost the queue" "$T/log-$n" || fail "$n never said it lost the queue"
  grep -q "connected to the queue" "$T/log-$n" || fail "$n never said it reconnected"
done

# every node stops cleanly, each in the middle of a job, which goes back to
# the queue. The job holds 1 GiB so that its release on the way out takes a
# while under `make asan` (freed device memory is poisoned): the server's
# snapshot thread then runs after the local queue is gone (it once leaked a
# string there).
: > "$T/ids4"
for n in n1 n3; do
  id=$(submit "$n" big "$T/input.txt")
  case $id in ERR:*) fail "slow submit before the stop: $id" ;; *) echo "$id" >> "$T/ids4" ;; esac
done
busy=$(python3 - "$T/ids4" "${URL[n1]}" <<'PY'
import json, sys, time, urllib.request
ids = [l.strip() for l in open(sys.argv[1]) if l.strip()]
end = time.time() + 60
while time.time() < end:
    try:
        st = [json.load(urllib.request.urlopen(sys.argv[2] + "/v1/jobs/" + u, timeout=2))["state"] for u in ids]
    except Exception:
        st = []
    if st and all(x == "running" for x in st):
        print("both"); sys.exit(0)
    time.sleep(0.1)
print("not both running: %s" % st)
PY
)
[ "$busy" = both ] || fail "before the stop: $busy"
for n in n1 n3; do kill -TERM "${NPID[$n]}"; done
for n in n1 n3; do
  wait "${NPID[$n]}"; rc=$?; unset "NPID[$n]"
  [ "$rc" = 0 ] || fail "node $n exited $rc on SIGTERM"
done
while read -r id; do
  st=$(rcli hget "t:job:$id" state)
  [ "$st" = queued ] || fail "job $id, running when its node stopped, is $st (expected queued again)"
done < "$T/ids4"
if [ "$fails" != 0 ]; then
  for n in n1 n2 n3; do echo "--- log $n"; tail -40 "$T/log-$n"; done
  echo "$fails failure(s)"; exit 1
fi
echo "cluster_redis: all checks passed"
