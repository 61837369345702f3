#!/usr/bin/env bash
# A PEER KILLED MID-REQUEST (issue 35, docs/broker.md "Timeouts and
# failures"): the asker is never held beyond --broker-timeout.
#   1. a peer that accepts and never answers (a Python socket on the fake
#      device's UUID): `ebb reclaim --broker-timeout 2` skips it and ends
#      within the timeout (+ slack for a loaded machine), naming it;
#   2. the same peer SIGKILLed after it accepted the request: the asker
#      hears the close at once (well before its 5 s timeout) and goes on;
#   3. a real `ebb serve` stopped (SIGSTOP: the kernel still queues the
#      connection) and SIGKILLed while the asker waits on it: the same;
#   4. four mute peers at once cost what one does (issue 45: they are asked
#      side by side): `ebb reclaim --broker-timeout 2` names all four
#      skipped and ends within the same bound as step 1;
# and the dead peers' entries are gone afterwards.
set -u
: "${EBB_BUILD_DIR:?}" "${EBB:?}"
. "$(dirname "$0")/../lib/fakegpu.sh"
export FAKEGPU_MEMORY_MIB=4096 FAKEGPU_CONTEXT_MIB=300
BD=$T/broker
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -CONT "$p"; kill -KILL "$p"; done 2>/dev/null; wait 2>/dev/null' EXIT
mkdir -p "$BD" && chmod 700 "$BD"
UUID=$("$FAKEGPU_SMI" --query-gpu=uuid --format=csv,noheader 2>/dev/null | head -1)

[ -n "$UUID" ] || { echo "FAIL: cannot read the fake device's UUID"; exit 1; }

# A peer that answers info (so it is asked) and then hangs on reclaim, after
# writing "accepted" into $2.
cat > "$T/mute.py" <<'PY'
import json, os, socket, sys, time
bd, flag, uuid = sys.argv[1], sys.argv[2], sys.argv[3]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(os.path.join(bd, "%d.sock" % os.getpid()))
s.listen(8)
held = []
for _ in range(100):  # bounded: the test kills it long before
    c, _ = s.accept()
    req = json.loads(c.makefile().readline())
    if req.get("op") == "info":
        c.sendall((json.dumps({"v": 2, "pid": os.getpid(), "what": "mute", "devices": [
            {"uuid": uuid, "label": "cuda:0", "held_bytes": 1 << 30, "givable_bytes": 1 << 30,
             "idle_s": 1e6}]}) + "\n").encode())
        c.close()
        continue
    held.append(c)  # never answered
    with open(flag, "a") as f:
        f.write("accepted\n")
PY
mute() { # FLAG: starts the mute peer, sets MUTE
  python3 "$T/mute.py" "$BD" "$1" "$UUID" &
  MUTE=$!
  PIDS+=($MUTE)
  for _ in $(seq 50); do [ -S "$BD/$MUTE.sock" ] && return; sleep 0.1; done
  fail "the mute peer did not bind"
}
secs() { date +%s.%N; }

# --- 1. silent: skipped within --broker-timeout
mute "$T/flag1"
t0=$(secs)
"$EBB" reclaim --device cuda:0 --bytes 5G --broker-dir "$BD" --broker-timeout 2 --wait 1 > "$T/r1.out" 2>&1
rc=$? took=$(echo "$(secs) - $t0" | bc)
cat "$T/r1.out"
echo "--- silent peer: the asker took $took s (--broker-timeout 2)"
[ $rc = 1 ] || fail "reclaim with a silent peer exited $rc, expected 1"
grep -q "pid $MUTE skipped: .*did not answer within 2.0 s" "$T/r1.out" || fail "the silent peer is not named as skipped"
[ "$(echo "$took < 4.5" | bc)" = 1 ] || fail "a silent peer held the asker $took s (--broker-timeout 2)"

# --- 2. SIGKILLed after accepting: heard at once
n0=$(wc -l < "$T/flag1")
"$EBB" reclaim --device cuda:0 --bytes 5G --broker-dir "$BD" --broker-timeout 5 --wait 1 > "$T/r2.out" 2>&1 &
ASK=$!
t0=$(secs)
for _ in $(seq 200); do [ "$(wc -l < "$T/flag1")" -gt "$n0" ] && break; sleep 0.02; done
sleep 0.3 # the asker is inside its request now
kill -KILL "$MUTE"
wait "$ASK"; rc=$?
took=$(echo "$(secs) - $t0" | bc)
cat "$T/r2.out"
echo "--- peer SIGKILLed mid-request: the asker took $took s (--broker-timeout 5)"
[ $rc = 1 ] || fail "reclaim with a killed peer exited $rc, expected 1"
grep -q "pid $MUTE skipped: .*closed without a whole answer" "$T/r2.out" ||
  fail "the killed peer is not named as closing mid-request"
[ "$(echo "$took < 3.5" | bc)" = 1 ] || fail "a peer killed mid-request held the asker $took s"
"$EBB" reclaim --device cuda:0 --bytes 1G --broker-dir "$BD" --wait 0.2 > /dev/null 2>&1
[ -e "$BD/$MUTE.sock" ] && fail "the killed peer's entry $BD/$MUTE.sock is still there"

# --- 3. a real ebb serve, stopped and then SIGKILLed while the asker waits
echo '{"pipelines": {"p": {"stages": [{"stage": "synthetic", "name": "w", "cache": false, "options": {"weights_mib": 512, "touch": "sample"}}]}}}' > "$T/cfg.json"
"$EBB" serve --listen 127.0.0.1:0 --config "$T/cfg.json" --data-dir "$T/data" --no-cache \
  --broker-dir "$BD" > "$T/logS" 2>&1 &
S=$!
PIDS+=($S)
for _ in $(seq 100); do URL=$(head -1 "$T/logS" 2>/dev/null | sed -n 's/^ebb: listening on //p'); [ -n "$URL" ] && break; sleep 0.1; done
for _ in $(seq 50); do [ -S "$BD/$S.sock" ] && break; sleep 0.1; done
[ -S "$BD/$S.sock" ] || fail "ebb serve did not register"
curl -s -o /dev/null -X POST "$URL/v1/pipelines/p/load"
kill -STOP "$S"
t0=$(secs)
"$EBB" reclaim --device cuda:0 --bytes 5G --broker-dir "$BD" --broker-timeout 5 --wait 1 > "$T/r3.out" 2>&1 &
ASK=$!
sleep 1
kill -KILL "$S"
wait "$ASK"; rc=$?
took=$(echo "$(secs) - $t0" | bc)
cat "$T/r3.out"
echo "--- ebb serve SIGKILLed mid-request: the asker took $took s (--broker-timeout 5)"
[ $rc = 1 ] || fail "reclaim with a killed ebb serve exited $rc, expected 1"
grep -q "pid $S skipped" "$T/r3.out" || fail "the killed ebb serve is not named as skipped"
[ "$(echo "$took < 4" | bc)" = 1 ] || fail "an ebb serve killed mid-request held the asker $took s"

# --- 4. four silent peers: one timeout, not four
MUTES=()
for i in 1 2 3 4; do mute "$T/flag4.$i"; MUTES+=($MUTE); done
t0=$(secs)
"$EBB" reclaim --device cuda:0 --bytes 5G --broker-dir "$BD" --broker-timeout 2 --wait 1 > "$T/r4.out" 2>&1
rc=$? took=$(echo "$(secs) - $t0" | bc)
cat "$T/r4.out"
echo "--- four silent peers: the asker took $took s (--broker-timeout 2; in turn they would cost 8 s)"
[ $rc = 1 ] || fail "reclaim with four silent peers exited $rc, expected 1"
for m in "${MUTES[@]}"; do
  grep -q "pid $m skipped: .*did not answer within 2.0 s" "$T/r4.out" || fail "silent peer $m is not named as skipped"
done
[ "$(echo "$took < 4.5" | bc)" = 1 ] || fail "four silent peers held the asker $took s (--broker-timeout 2)"

[ $fails -eq 0 ] && echo "broker_peer_killed: ok"
exit $((fails > 0))
