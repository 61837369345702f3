#!/usr/bin/env bash
# Scale-out throughput (docs/scale-out.md): the same sleep-bound workload
# (synthetic stages that wait run_ms, so the machine's cores are not the
# limit) through one Redis queue served by 1 node, then by 3 nodes, each node
# with its own fake GPU. Prints jobs/s for each and the ratio (goal >= 2.7x).
# Needs redis-server (scripts/install-deps.sh). JOBS, RUN_MS override.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
EBB=${EBB:-$HERE/../ebb}
JOBS=${JOBS:-30}
RUN_MS=${RUN_MS:-1000}
command -v redis-server >/dev/null || { echo "cluster_throughput: redis-server missing (scripts/install-deps.sh)" >&2; exit 1; }
T=$(mktemp -d "${TMPDIR:-/tmp}/ebb-cluster-bench.XXXXXX")
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$T"
}
trap cleanup EXIT
mkdir -p "$T/redis"
redis-server --port "$PORT" --bind 127.0.0.1 --dir "$T/redis" --appendonly yes --save "" \
  --daemonize no --logfile "$T/redis/log" &
PIDS+=($!)
for _ in $(seq 100); do redis-cli -p "$PORT" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
cat > "$T/cfg.json" <<JSON
{"pipelines": {"sleepy": {"stages": [{"stage": "synthetic", "name": "s",
  "options": {"weights_mib": 8, "run_ms": $RUN_MS}}]}}}
JSON
echo input > "$T/in.txt"

# run NODES: starts them under prefix bN, submits JOBS, prints seconds to all done
run() {
  local nodes=$1 urls=() pids=()
  for i in $(seq 1 "$nodes"); do
    FAKEGPU_STATE="$T/gpu-$nodes-$i" "$EBB" serve --config "$T/cfg.json" --listen 127.0.0.1:0 \
      --data-dir "$T/data-$nodes-$i" --input-dir "$T" --no-cache --node-id "b$nodes-$i" \
      --queue "redis://127.0.0.1:$PORT" --queue-prefix "b$nodes" > "$T/log-$nodes-$i" 2>&1 &
    pids+=($!); PIDS+=($!)
    for _ in $(seq 100); do grep -q '^ebb: listening on' "$T/log-$nodes-$i" && break; sleep 0.1; done
    urls+=("$(head -1 "$T/log-$nodes-$i" | sed -n 's/^ebb: listening on //p')")
  done
  python3 - "$JOBS" "$T/in.txt" "${urls[@]}" <<'PY'
import json, sys, time, urllib.request
jobs, inp, urls = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
def call(url, body=None):
    req = urllib.request.Request(url, data=body and json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=10))
t0 = time.time()
ids = [call(urls[i % len(urls)] + "/v1/jobs", {"pipeline": "sleepy", "input": inp})["id"]
       for i in range(jobs)]
left = set(ids)
while left and time.time() - t0 < 600:
    for uid in list(left):
        if call(urls[0] + "/v1/jobs/" + uid)["state"] in ("succeeded", "failed", "cancelled"):
            left.discard(uid)
    time.sleep(0.2)
if left: sys.exit("jobs left unfinished: %d" % len(left))
print("%.3f" % (time.time() - t0))
PY
  local rc=$?
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  return $rc
}
t1=$(run 1) || { echo "cluster_throughput: the 1-node run failed" >&2; exit 1; }
t3=$(run 3) || { echo "cluster_throughput: the 3-node run failed" >&2; exit 1; }
python3 - "$JOBS" "$RUN_MS" "$t1" "$t3" <<'PY'
import sys
jobs, run_ms, t1, t3 = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
print("cluster_throughput: %d jobs of one %d ms sleep-bound stage through one Redis" % (jobs, run_ms))
print("  1 node : %6.2f s  %6.2f jobs/s" % (t1, jobs / t1))
print("  3 nodes: %6.2f s  %6.2f jobs/s" % (t3, jobs / t3))
print("  ratio 3 nodes / 1 node: %.2fx (goal >= 2.7x)" % (t1 / t3))
PY
