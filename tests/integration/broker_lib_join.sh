#!/usr/bin/env bash
# A program that links libebb gives memory back when asked (issue 35: "any
# program using libebb that opts in"): a Python process with ebb.broker_join()
# holds a model cache (1 GiB, dropped by its on_release hook), 2 GiB of
# cached segments and a live 512 MiB block on a fake 8 GiB GPU. `ebb reclaim`
# from the shell asks it for the free memory + 3000 MiB and gets the cache
# and the segments back: the figure ebb reclaim prints for the peer equals
# the drop fakegpu-smi shows for it (within 1 MiB). Asked for more than the
# device holds, ebb reclaim exits 1 naming the live blocks the program keeps.
# After leave() the socket is gone and nobody is asked.
set -u
: "${EBB_BUILD_DIR:?}" "${EBB_SOURCE_DIR:?}"
. "$(dirname "$0")/../lib/server.sh"
export FAKEGPU_MEMORY_MIB=8192 FAKEGPU_CONTEXT_MIB=300 EBB_LIB=$EBB_BUILD_DIR/libebb.so
BD="$T/broker"
PYENV=(PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=$EBB_SOURCE_DIR/python)
if grep -q '^EBB_SANITIZE:BOOL=ON' "$EBB_BUILD_DIR/CMakeCache.txt" 2>/dev/null; then
  PYENV+=(LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
          ASAN_OPTIONS=detect_leaks=0)
fi
env "${PYENV[@]}" python3 - "$BD" "$T" > "$T/py.out" 2>&1 <<'PY' &
import os, sys, time, ebb
broker, tmp = sys.argv[1], sys.argv[2]
def wait_for(name):  # the test says when to go on (bounded: 60 s)
    for _ in range(600):
        if os.path.exists(os.path.join(tmp, name)):
            return
        time.sleep(0.1)
    raise SystemExit("no %s within 60 s" % name)
MiB = 1 << 20
d = ebb.device("cuda:0")
cache = [d.alloc(1024 * MiB, site="model-cache")]
def drop_cache():
    while cache:
        d.free(cache.pop())
ebb.on_release(drop_cache, name="model cache")
live = d.alloc(512 * MiB, site="live.py:1")  # first: a segment of its own
seg = d.alloc(2048 * MiB)
d.free(seg)  # 2 GiB of cached segments
peer = ebb.broker_join(broker, what="notebook")
print("ready", flush=True)
wait_for("leave")
peer.leave()
print("left", flush=True)
wait_for("end")
print("done", flush=True)
PY
PY_PID=$!
for _ in $(seq 100); do grep -q ready "$T/py.out" && break; sleep 0.1; done
grep -q ready "$T/py.out" || { fail "the program did not start: $(cat "$T/py.out")"; kill "$PY_PID"; exit 1; }
[ -S "$BD/$PY_PID.sock" ] || fail "no socket $BD/$PY_PID.sock after broker_join"
before=$(held_by "$PY_PID")
free=$("$FAKEGPU_SMI" --query-gpu=memory.free --format=csv,noheader,nounits | head -1)
"$EBB" reclaim --device cuda:0 --bytes "$((free + 3000))MiB" --broker-dir "$BD" > "$T/r1" 2>&1
rc=$?
cat "$T/r1"
[ $rc = 0 ] || fail "ebb reclaim exited $rc though the program could give 3 GiB"
after=$(held_by "$PY_PID")
gave=$(sed -n "s/.*pid $PY_PID (notebook) gave back \([0-9]*\) MiB.*/\1/p" "$T/r1" | head -1)
[ -n "$gave" ] || fail "ebb reclaim names no figure for pid $PY_PID (notebook)"
d=$(( before - after - ${gave:-0} )); d=${d#-}
[ "$d" -le 1 ] || fail "ebb reclaim printed ${gave} MiB for the program, fakegpu-smi shows $before -> $after MiB"
[ "${gave:-0}" -ge 3072 ] || fail "the program gave ${gave} MiB, expected its cache and segments (3072 MiB)"
echo "--- the program gave $gave MiB (fakegpu-smi: $before -> $after MiB)"
"$EBB" reclaim --device cuda:0 --bytes 8G --broker-dir "$BD" > "$T/r2" 2>&1
rc=$?
cat "$T/r2"
[ $rc = 1 ] || fail "asked for 8 GiB (the whole device) ebb reclaim exited $rc, expected 1"
grep -q "keeps live blocks.*in use by the program (notebook)" "$T/r2" ||
  fail "ebb reclaim does not say the program keeps its live blocks"
touch "$T/leave"
for _ in $(seq 50); do grep -q left "$T/py.out" && break; sleep 0.1; done
[ -e "$BD/$PY_PID.sock" ] && fail "the socket is still there after leave()"
touch "$T/end"
wait "$PY_PID" || fail "the program exited $?: $(cat "$T/py.out")"
grep -q done "$T/py.out" || fail "the program did not finish: $(cat "$T/py.out")"
[ $fails -eq 0 ] && echo "broker_lib_join: ok"
exit $((fails > 0))
