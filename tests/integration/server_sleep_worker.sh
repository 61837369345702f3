#!/usr/bin/env bash
# SLEEP IN THE WORKER (issue 42): a Python SDK stage with uses_gpu offers
# "sleep" in its hello, so under `ebb serve` its sleep does not stop the
# worker: POST /sleep has it copy its 512 MiB of weights (an ebb owner's
# block) to host memory and give the device memory back (fakegpu-smi: the
# worker drops by at least 512 MiB and stays listed, with its context);
# the log says so; a job wakes it with no load: same worker pid, same block
# address, the same bytes read back; under the release policy sleep, the
# second of two jobs wakes it likewise.
set -u
. "$(dirname "$0")/../lib/server.sh"
export FAKEGPU_MEMORY_MIB=8192 FAKEGPU_CONTEXT_MIB=300
# The worker's Python loads this build's libebb.so; an ASan build's needs its
# runtime loaded first (as in python_owners.sh), in the worker alone: curl
# with the runtime preloaded hangs in setlocale.
export EBB_LIB=$EBB_BUILD_DIR/libebb.so PYTHONDONTWRITEBYTECODE=1
W=$EBB_SOURCE_DIR/tests/support/sleepy_worker.py
if grep -q '^EBB_SANITIZE:BOOL=ON' "$EBB_BUILD_DIR/CMakeCache.txt" 2>/dev/null; then
  printf '#!/bin/sh\nLD_PRELOAD="%s %s" ASAN_OPTIONS=detect_leaks=0 exec python3 "%s" "$@"\n' \
    "$(gcc -print-file-name=libasan.so)" "$(gcc -print-file-name=libubsan.so)" "$W" > "$T/sleepy.sh"
  chmod +x "$T/sleepy.sh"
  W=$T/sleepy.sh
fi
cat > "$T/cfg.json" <<JSON
{"pipelines": {
  "p": {"stages": [{"stage": "sleepy", "worker": "$W"}]},
  "q": {"release": "sleep", "stages": [{"stage": "sleepy", "name": "sleepy2", "worker": "$W"}]}}}
JSON
echo "any input" > "$T/input.txt"
serve "$T/log" --config "$T/cfg.json" --data-dir "$T/data" --input-dir "$T"
weights() { # the "weights" item of a job's result ($T/NAME.json, run_job)
  python3 -c 'import json, sys
for i in json.load(open(sys.argv[1])):
    if i.get("name") == "weights":
        print(json.dumps(i.get("value", i.get("text")), sort_keys=True))' "$T/$1.json"
}
worker_mib() { apps | awk -F', *' -v p="$SERVER" '$1 != p {s += $2} END {print s + 0}'; }

req POST /v1/pipelines/p/load # kept loaded between jobs (the policy after-stage would end it)
[ "$CODE" = 200 ] || fail "load p: $CODE $BODY"
run_job first p
loaded=$(worker_mib)
[ "$loaded" -ge 812 ] || fail "loaded: the worker holds $loaded MiB, expected >= 812 (512 + context)"
req POST /v1/pipelines/p/sleep
[ "$CODE" = 200 ] || fail "sleep p: $CODE $BODY"
asleep=$(worker_mib)
echo "worker: $loaded MiB loaded, $asleep MiB asleep; sleep answered $BODY"
[ $((loaded - asleep)) -ge 512 ] || fail "asleep: the worker dropped $((loaded - asleep)) MiB, expected >= 512"
[ "$asleep" -ge 300 ] || fail "asleep: the worker holds $asleep MiB: it was stopped, not put to sleep"
[ "$(jget "$BODY" '["backup_bytes"]')" -ge $((512 << 20)) ] || fail "sleep kept less than 512 MiB: $BODY"
rel=$(jget "$BODY" '["released_bytes"]')
[ $(((loaded - asleep) - (rel >> 20))) -le 1 ] && [ $(((rel >> 20) - (loaded - asleep))) -le 1 ] ||
  fail "sleep says $((rel >> 20)) MiB released, fakegpu-smi saw $((loaded - asleep)) MiB go"
grep -q '\[sleepy\] asleep: isolated, its worker (pid [0-9]*) keeps 512 MiB of weights in host memory' "$T/log" ||
  fail "no '[sleepy] asleep: isolated, its worker ... keeps 512 MiB' line"
run_job woken p
grep -q '\[sleepy\] awake: isolated, its worker (pid [0-9]*) restored 512 MiB' "$T/log" ||
  fail "no '[sleepy] awake: isolated, its worker ... restored 512 MiB' line"
grep -q 'loaded again in a new worker' "$T/log" && fail "the wake loaded a new worker"
a=$(weights first) b=$(weights woken)
[ -n "$a" ] && [ "$a" = "$b" ] || fail "the woken stage's weights differ (address, bytes or worker): $a vs $b"
[ "$(worker_mib)" -ge 812 ] || fail "woken: the worker holds $(worker_mib) MiB"

# the release policy sleep: the second job wakes what the first put to sleep
run_job q1 q
wait_log "$T/log" '\[sleepy2\] asleep: isolated, its worker' 300 || fail "policy sleep: job 1 did not put sleepy2 to sleep"
run_job q2 q
grep -q '\[sleepy2\] awake: isolated, its worker (pid [0-9]*) restored 512 MiB' "$T/log" ||
  fail "policy sleep: job 2 did not wake sleepy2 from host memory"
a=$(weights q1) b=$(weights q2)
[ -n "$a" ] && [ "$a" = "$b" ] || fail "policy sleep: the weights differ across the wake: $a vs $b"
req POST /v1/pipelines/p/unload
[ "$CODE" = 200 ] || fail "unload p: $CODE $BODY"
stop_server
[ "$fails" = 0 ] && echo "server_sleep_worker: ok"
exit $((fails > 0))
