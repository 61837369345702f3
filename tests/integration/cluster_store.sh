#!/usr/bin/env bash
# SCALE-OUT: WHAT REDIS KEEPS (docs/scale-out.md). A real redis-server on a
# free loopback port in a temp dir, two `ebb serve --queue` nodes with their
# own fake GPUs and no --shared-dir:
#  1. outputs travel in Redis: a job run on n1 while n2 was not even up is
#     read back byte for byte through GET /v1/jobs/ID/files/NAME on n2 (and
#     on n1); unknown names are 404 naming the job;
#  2. --keep-jobs 3 on n1 bounds what n1 ended: of 6 jobs the 3 oldest lose
#     their hash, their inline input, their attempt directory and their
#     stream entry (GET is 404 on any node); the newest 3 stay;
#  3. routing: a pipeline asleep on idle n2 draws the jobs submitted to n1
#     (the heartbeat lists it under "asleep"), so it is not loaded twice;
#  4. --keep-jobs 2s on n2: the jobs n2 ended are gone from Redis 2 s later.
set -u
: "${EBB:?}"
. "$(dirname "$0")/../lib/cluster.sh"
export FAKEGPU_MEMORY_MIB=2048 FAKEGPU_CONTEXT_MIB=300
start_redis

cat > "$T/cfg.json" <<'JSON'
{"pipelines": {
  "Q": {"stages": [{"stage": "synthetic", "name": "q1",
                    "options": {"weights_mib": 32, "run_ms": 50}}]},
  "S": {"stages": [{"stage": "synthetic", "name": "s1",
                    "options": {"weights_mib": 64, "run_ms": 50}}], "release": "sleep"}}}
JSON
echo "small input" > "$T/input.txt"

start_node() { # name [extra flags]
  local n=$1; shift
  FAKEGPU_STATE="$T/gpu-$n" "$EBB" serve --config "$T/cfg.json" --listen 127.0.0.1:0 \
    --data-dir "$T/data-$n" --input-dir "$T" --no-cache --queue "redis://127.0.0.1:$PORT/0" \
    --queue-prefix s --node-id "$n" --lease 3 "$@" > "$T/log-$n" 2>&1 &
  NPID[$n]=$!
  node_up "$n"
}
submit() { # node pipeline -> the id, or ERR:CODE:body
  local out code
  out=$(curl -s -w '\n%{http_code}' -X POST "${URL[$1]}/v1/jobs" -H 'Content-Type: application/json' \
        -d "{\"pipeline\": \"$2\", \"input\": \"$T/input.txt\"}")
  code=${out##*$'\n'}; out=${out%$'\n'*}
  if [ "$code" = 202 ]; then jget "$out" '["id"]'; else echo "ERR:$code:$out"; fi
}
wait_done() { # node id seconds [field] -> the final state (or "timeout"), then
  # the job's FIELD from the same answer: n2 keeps its ended jobs 2 s, so a
  # second GET on a loaded machine can find the job pruned (an empty node)
  local st j
  for _ in $(seq $(($3 * 10))); do
    j=$(curl -s "${URL[$1]}/v1/jobs/$2")
    st=$(jget "$j" '["state"]')
    case $st in succeeded|failed|cancelled)
      echo "$st${4:+ $(jget "$j" "[\"$4\"]")}"
      return ;;
    esac
    sleep 0.1
  done
  echo timeout
}

# --- 1. outputs in Redis, read on another node ---------------------------------------
start_node n1 --keep-jobs 3
: > "$T/ids"
for i in 1 2 3 4 5 6; do
  id=$(submit n1 Q)
  case $id in ERR:*) fail "submit $i: $id" ;; *) echo "$id" >> "$T/ids" ;; esac
  st=$(wait_done n1 "$id" 60)
  [ "$st" = succeeded ] || fail "job $i ($id) ended $st on n1 alone"
done
start_node n2 --keep-jobs 2s
LAST=$(tail -1 "$T/ids")
res=$(curl -s "${URL[n2]}/v1/jobs/$LAST/result")
[ "$(jget "$res" '["where"]')" = redis ] || fail "without --shared-dir a small output should travel in Redis: $res"
files=$(jget "$res" '["files"]')
case $files in *"redis:s:job:$LAST#out:result.json"*) ;; *) fail "the result does not name result.json in Redis: $res" ;; esac
local_copy=$(ls "$T"/data-n1/jobs/"$LAST"/a*/out/result.json 2>/dev/null | head -1)
[ -n "$local_copy" ] || fail "n1 has no result.json of $LAST"
for n in n2 n1; do
  code=$(curl -s -o "$T/got-$n.json" -w '%{http_code}' "${URL[$n]}/v1/jobs/$LAST/files/result.json")
  [ "$code" = 200 ] && cmp -s "$T/got-$n.json" "$local_copy" ||
    fail "GET /v1/jobs/$LAST/files/result.json on $n: $code, $(head -c 200 "$T/got-$n.json")"
done
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["pipeline"] == "Q", d' "$T/got-n2.json" ||
  fail "the output read on n2 is not Q's result.json"
out=$(curl -s -w '\n%{http_code}' "${URL[n2]}/v1/jobs/$LAST/files/nosuch.bin")
[ "${out##*$'\n'}" = 404 ] && case $out in *"has no output 'nosuch.bin'"*) true ;; *) false ;; esac ||
  fail "an unlisted output name: expected 404 naming it, got $out"

# --- 2. --keep-jobs 3 on n1 ------------------------------------------------------------
sleep 2.5 # the beat thread prunes about once a second
mapfile -t IDS < "$T/ids"
kept=$(rcli zcard s:done:n1)
[ "$kept" = 3 ] || fail "n1 keeps $kept jobs in s:done:n1, expected 3 (--keep-jobs 3)"
for i in 0 1 2; do
  id=${IDS[$i]}
  [ "$(rcli exists "s:job:$id" "s:input:$id")" = 0 ] || fail "pruned job $id still has its hash or input in Redis"
  [ ! -e "$T/data-n1/jobs/$id" ] || fail "pruned job $id still has its directory on n1"
  code=$(curl -s -o /dev/null -w '%{http_code}' "${URL[n2]}/v1/jobs/$id")
  [ "$code" = 404 ] || fail "pruned job $id: GET on n2 answered $code, expected 404"
done
for i in 3 4 5; do
  id=${IDS[$i]}
  [ "$(jget "$(curl -s "${URL[n2]}/v1/jobs/$id")" '["state"]')" = succeeded ] || fail "kept job $id is gone"
done
[ "$(rcli xlen s:stream:Q)" = 0 ] || fail "s:stream:Q keeps $(rcli xlen s:stream:Q) entries of ended jobs"
grep -q -- "--keep-jobs: removed" "$T/log-n1" || fail "n1 never logged what --keep-jobs removed"

# --- 3. a pipeline asleep on idle n2 draws the jobs --------------------------------------
out=$(curl -s -X POST "${URL[n2]}/v1/pipelines/S/load")
out=$(curl -s -X POST "${URL[n2]}/v1/pipelines/S/sleep")
[ "$(jget "$out" '["asleep"]')" = True ] || fail "POST /v1/pipelines/S/sleep on n2: $out"
for _ in $(seq 50); do
  c=$(curl -s "${URL[n1]}/v1/cluster")
  python3 -c 'import json,sys; c=json.loads(sys.argv[1]); n=[x for x in c["nodes"] if x["id"]=="n2"][0]; sys.exit(0 if "S" in n.get("asleep", []) else 1)' "$c" && break
  sleep 0.1
done
python3 -c 'import json,sys; c=json.loads(sys.argv[1]); n=[x for x in c["nodes"] if x["id"]=="n2"][0]; sys.exit(0 if "S" in n.get("asleep", []) and "S" in n["loaded"] else 1)' "$c" ||
  fail "GET /v1/cluster does not list S asleep (and loaded) on n2: $c"
# n2's heartbeat says it is idle (running: null), then n1's hint, refreshed
# every heartbeat (at most 1 s), catches up with it
n2_idle() {
  local i
  for i in $(seq 100); do
    rcli get s:node:n2 | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin).get("running") is None else 1)' 2>/dev/null && break
    sleep 0.1
  done
  [ "$i" -lt 100 ] || fail "n2's heartbeat (s:node:n2) never said it was idle: $(rcli get s:node:n2)"
  sleep 1.5
}
n2_idle
: > "$T/ids-s"
for i in 1 2 3 4; do
  id=$(submit n1 S)
  case $id in ERR:*) fail "submit S $i: $id"; continue ;; esac
  echo "$id" >> "$T/ids-s"
  read -r st node <<< "$(wait_done n1 "$id" 60 node)"
  [ "$st" = succeeded ] && [ "$node" = n2 ] || fail "S job $i ($id): $st on $node, expected to run on n2 where S sleeps"
  n2_idle # (a fixed 1.2 s here could end before n2's next heartbeat + n1's refresh)
done
case $(curl -s "${URL[n1]}/metrics" | grep '^ebb_pipeline_loaded{node="n1",pipeline="S"}') in
  *" 0") ;; *) fail "S was loaded on n1 too: $(curl -s "${URL[n1]}/metrics" | grep ebb_pipeline_loaded)" ;; esac

# --- 4. --keep-jobs 2s on n2: what n2 ended is gone 2 s later -----------------------------
sleep 2.5
[ "$(rcli zcard s:done:n2)" = 0 ] || fail "n2 (--keep-jobs 2s) still keeps $(rcli zcard s:done:n2) jobs"
while read -r id; do
  code=$(curl -s -o /dev/null -w '%{http_code}' "${URL[n1]}/v1/jobs/$id")
  [ "$code" = 404 ] || fail "S job $id, ended on n2 over 2 s ago: GET on n1 answered $code, expected 404"
done < "$T/ids-s"

for n in n1 n2; do
  kill -TERM "${NPID[$n]}"; wait "${NPID[$n]}"; rc=$?; unset "NPID[$n]"
  [ "$rc" = 0 ] || fail "node $n exited $rc on SIGTERM"
done
if [ "$fails" != 0 ]; then
  for n in n1 n2; do echo "--- log $n"; tail -30 "$T/log-$n"; done
  echo "$fails failure(s)"; exit 1
fi
echo "cluster_store: all checks passed"
