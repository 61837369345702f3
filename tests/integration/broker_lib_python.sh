#!/usr/bin/env bash
# ebb.reclaim() in Python over ebb_reclaim() in libebb (issue 35): a foreign
# process about to allocate asks the `ebb serve` sharing its fake 8 GiB GPU
# for the free memory + 3000 MiB; the server unloads its idle 3 GiB pipeline
# and ebb.reclaim says satisfied with 3072 MiB given (the context stays for a pipeline that is "evictable": false), as fakegpu-smi shows.
# Asked for 16 GiB it is not satisfied and the message names what the
# server keeps and why; a device that is not cuda:N raises EbbError.
set -u
: "${EBB_BUILD_DIR:?}" "${EBB_SOURCE_DIR:?}"
. "$(dirname "$0")/../lib/server.sh"
export FAKEGPU_MEMORY_MIB=8192 FAKEGPU_CONTEXT_MIB=300 EBB_LIB=$EBB_BUILD_DIR/libebb.so
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {"idle": {"stages": [{"stage": "synthetic", "name": "i", "cache": false,
                                    "options": {"weights_mib": 3072, "touch": "sample"}}]},
               "keep": {"evictable": false, "stages": [{"stage": "synthetic", "name": "k",
                        "cache": false, "options": {"weights_mib": 512, "touch": "sample"}}]}}}
JSON
serve "$T/log" --config "$T/cfg.json" --data-dir "$T/data" --broker-dir "$T/broker"
req POST /v1/pipelines/keep/load
[ "$CODE" = 200 ] || fail "load keep: $CODE $BODY"
req POST /v1/pipelines/idle/load
[ "$CODE" = 200 ] || fail "load idle: $CODE $BODY"
for _ in $(seq 50); do [ -S "$T/broker/$SERVER.sock" ] && break; sleep 0.1; done
before=$(held_by "$SERVER")
PYENV=(PYTHONDONTWRITEBYTECODE=1)
if grep -q '^EBB_SANITIZE:BOOL=ON' "$EBB_BUILD_DIR/CMakeCache.txt" 2>/dev/null; then
  # an ASan build's libebb needs its runtime loaded first into Python
  PYENV+=(LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
          ASAN_OPTIONS=detect_leaks=0)
fi
env "${PYENV[@]}" PYTHONPATH=$EBB_SOURCE_DIR/python python3 - "$T/broker" "$FAKEGPU_SMI" > "$T/py.out" 2>&1 <<'PY' || fail "python: $(cat "$T/py.out")"
import subprocess, sys
import ebb
broker, smi = sys.argv[1], sys.argv[2]
free = int(subprocess.check_output([smi, "--query-gpu=memory.free", "--format=csv,noheader,nounits"]).split()[0])
want = (free + 3000) << 20
r = ebb.reclaim(want, device="cuda:0", broker_dir=broker, timeout=60)
print("first", r)
assert r["satisfied"], r
assert r["given_bytes"] == 3072 << 20, r  # the context stays for keep
assert r["free_after"] >= want and r["peers_asked"] == 1 and r["peers_skipped"] == 0, r
r = ebb.reclaim(16 << 30, device="cuda:0", broker_dir=broker, timeout=60)
print("second", r)
assert not r["satisfied"], r
assert 'keeps pipeline keep' in r["message"] and '"evictable": false' in r["message"], r
try:
    ebb.reclaim(1, device="gpu0", broker_dir=broker)
    raise SystemExit("device gpu0 did not raise")
except ebb.EbbError as e:
    assert e.name == "EBB_EINVAL" and "gpu0" in e.message, e
print("ok")
PY
cat "$T/py.out"
after=$(held_by "$SERVER")
[ $((before - after)) = 3072 ] || fail "fakegpu-smi: the server went $before -> $after MiB, expected a 3072 MiB drop (idle's weights; the context stays for keep)"
stop_server || fail "ebb serve exited $? on SIGTERM"
[ $fails -eq 0 ] && echo "broker_lib_python: ok"
exit $((fails > 0))
