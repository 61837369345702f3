#!/usr/bin/env bash
# A worker that crashes, hangs, exits early, speaks garbage or runs out of
# device memory fails the JOB (exit 1) with a message naming the stage, the
# worker's pid and what happened; ebb never crashes or hangs; no worker is
# left running and nothing is left on the device (fakegpu-smi). A SIGKILLed
# ebb takes its worker with it (PR_SET_PDEATHSIG).
set -u
: "${EBB:?}" "${EBB_WORKER:?}"
. "$(dirname "$0")/../lib/fakegpu.sh"
: "${EBB_SOURCE_DIR:?}"
export FAKEGPU_CONTEXT_MIB=300 FAKEGPU_MEMORY_MIB=4096
BAD=$EBB_SOURCE_DIR/tests/support/worker_bad.py
used_total() { "$FAKEGPU_SMI" --query-gpu=memory.used --format=csv,noheader,nounits; }
echo "any input" > "$T/input.txt"

# expect1 NAME CONFIG_JSON PATTERN...: ebb run exits 1 within 15 s and stderr
# has every pattern (the worker pid from $T/pid when the worker wrote it).
expect1() {
  local name=$1 cfg=$2
  shift 2
  rm -f "$T/pid"
  echo "$cfg" > "$T/$name.json"
  local t0=$SECONDS
  timeout 15 "$EBB" run --pipeline p --config "$T/$name.json" "$T/input.txt" -o "$T/out" \
    --no-cache > "$T/$name.out" 2> "$T/$name.err"
  local rc=$?
  echo "--- $name (exit $rc, $((SECONDS - t0)) s): $(cat "$T/$name.err")"
  [ $rc -eq 1 ] || fail "$name: exit $rc, expected 1 (job failed)"
  for pat in "$@"; do
    grep -q -- "$pat" "$T/$name.err" || fail "$name: stderr lacks '$pat'"
  done
  if [ -s "$T/pid" ]; then
    local wpid
    wpid=$(cat "$T/pid")
    grep -Eq "worker pid $wpid([^0-9]|$)" "$T/$name.err" || fail "$name: message does not name worker pid $wpid"
    kill -0 "$wpid" 2>/dev/null && fail "$name: worker pid $wpid is still running"
  fi
  [ -z "$(apps)" ] || fail "$name: device not empty afterwards: $(apps)"
}
badcfg() {  # badcfg MODE [extra stage keys]
  echo "{\"pipelines\": {\"p\": {\"stages\": [{\"stage\": \"bad\", \"worker\": \"$BAD\",
    \"worker_args\": [\"$1\", \"$T/pid\"]${2:-}}]}}}"
}

expect1 crash-load "$(badcfg crash-load)" "stage 'bad'" "failed to load" "killed by signal SIGSEGV"
expect1 crash-run "$(badcfg crash-run)" "stage 'bad'" "killed by signal SIGSEGV" "during run"
expect1 abort-run "$(badcfg abort-run)" "stage 'bad'" "killed by signal SIGABRT"
expect1 exit-early "$(badcfg exit-early)" "stage 'bad'" "exited with status 3" "without answering"
expect1 hang-timeout "$(badcfg hang-run ', "timeout_s": 4')" "stage 'bad' timed out" \
  "did not answer run in time (timeout); killed"
EBB_WORKER_TIMEOUT_S=4 expect1 hang-default "$(badcfg hang-run)" "stage 'bad'" \
  "did not answer run in time (timeout)"
expect1 garbage "$(badcfg garbage-hello)" "stage 'bad'" "protocol error during hello" "invalid JSON"
expect1 oversized "$(badcfg oversized)" "protocol error" "oversized frame"
expect1 truncated "$(badcfg truncated)" "protocol error" "truncated frame"
expect1 bad-protocol "$(badcfg bad-protocol)" "protocol error" "protocol 99"
expect1 bad-result "$(badcfg bad-result)" "protocol error" "result item #1"
expect1 error-answer "$(badcfg error-run)" "stage 'bad' (bad) failed" "bad: no memory for this"
expect1 no-such-worker '{"pipelines": {"p": {"stages": [{"stage": "x", "worker": "/no/such/worker"}]}}}' \
  "stage 'x'" "cannot start worker /no/such/worker"

# ebb-worker itself: out of device memory, the stage's own failure, a crash
expect1 oom '{"pipelines": {"p": {"stages": [{"stage": "synthetic", "name": "big", "isolate": true,
  "options": {"weights_mib": 8192, "touch": "sample"}}]}}}' "stage 'big'" "failed to load" "allocating 8192 MiB failed" "worker pid"
expect1 fail-run '{"pipelines": {"p": {"stages": [{"stage": "synthetic", "name": "f", "isolate": true,
  "options": {"weights_mib": 256, "fail": "run", "touch": "sample"}}]}}}' "stage 'f'" "fail=run" "worker pid"

# a crash from outside while ebb-worker holds 1 GiB (a sanitizer build must
# let the signal kill it, as a real crash would)
worker_of() { # EBB_PID: the pid of the process beside EBB_PID that holds >= 1 GiB (5 s at most)
  local w=
  for _ in $(seq 1 100); do
    w=$(apps | awk -F', *' -v e="$1" '$1 != e && $2 >= 1024 {print $1}')
    [ -n "$w" ] && break
    sleep 0.05
  done
  echo "$w"
}
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_segv=0"
echo '{"pipelines": {"p": {"stages": [{"stage": "synthetic", "name": "s", "isolate": true,
  "options": {"weights_mib": 1024, "run_ms": 5000, "touch": "sample"}}]}}}' > "$T/segv.json"
"$EBB" run --pipeline p --config "$T/segv.json" "$T/input.txt" -o "$T/out" --no-cache \
  > "$T/segv.out" 2> "$T/segv.err" &
ebb_pid=$!
wpid=$(worker_of "$ebb_pid")
if [ -z "$wpid" ]; then
  fail "segv: the worker never held 1 GiB"
  kill "$ebb_pid"
fi
[ -n "$wpid" ] && kill -SEGV "$wpid"
wait "$ebb_pid"
rc=$?
echo "--- segv (exit $rc): $(cat "$T/segv.err")"
[ $rc -eq 1 ] || fail "segv: exit $rc, expected 1"
# (a debug build may still be loading: "failed to load ... during load")
grep -Eq "stage 's' \(synthetic\) failed( to load)?: worker pid $wpid \(ebb-worker\) was killed by signal SIGSEGV" \
  "$T/segv.err" || fail "segv: message"
[ -z "$(apps)" ] || fail "segv: device not empty: $(apps)"
[ "$(used_total)" -eq 0 ] || fail "segv: memory.used $(used_total) MiB"

# SIGKILL of ebb: its worker dies with it
"$EBB" run --pipeline p --config "$T/segv.json" "$T/input.txt" -o "$T/out" --no-cache \
  > /dev/null 2>&1 &
ebb_pid=$!
wpid=$(worker_of "$ebb_pid")
[ -n "$wpid" ] || fail "sigkill: the worker never held 1 GiB"
kill -KILL "$ebb_pid"
wait "$ebb_pid" 2>/dev/null
gone=0
for _ in $(seq 1 50); do
  if [ -n "$wpid" ] && ! kill -0 "$wpid" 2>/dev/null; then gone=1; break; fi
  sleep 0.05
done
echo "--- sigkill: ebb $ebb_pid killed; worker $wpid gone=$gone"
[ $gone -eq 1 ] || { fail "sigkill: worker pid $wpid outlived ebb"; kill -KILL "$wpid" 2>/dev/null; }
[ -z "$(apps)" ] || fail "sigkill: device not empty: $(apps)"

ls /dev/shm | grep -q "^ebb-w" && fail "shared memory left behind: $(ls /dev/shm | grep '^ebb-w')"
[ $fails -eq 0 ] && echo "worker_failures: ok"
exit $((fails > 0))
