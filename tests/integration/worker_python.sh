#!/usr/bin/env bash
# The Python example worker (examples/workers/gain_worker.py) through its
# config (examples/workers/gain.json): decode runs in ebb, "gain" in the
# Python process; audio crosses both ways in shared memory. The output is
# the input at half the level, and nothing is left in /dev/shm.
set -u
: "${EBB:?}" "${EBB_SOURCE_DIR:?}"
. "$(dirname "$0")/../lib/common.sh"
python3 - "$T/tone.wav" <<'PY'
import math, struct, sys, wave
w = wave.open(sys.argv[1], "wb")
w.setnchannels(1); w.setsampwidth(2); w.setframerate(16000)
w.writeframes(b"".join(struct.pack("<h", int(16000 * math.sin(2 * math.pi * 440 * i / 16000)))
                       for i in range(16000)))
w.close()
PY
"$EBB" run --pipeline gain --config "$EBB_SOURCE_DIR/examples/workers/gain.json" \
  "$T/tone.wav" -o "$T/out" --no-cache --device cpu > "$T/log" 2>&1
rc=$?
cat "$T/log"
[ $rc -eq 0 ] || fail "ebb run exited $rc"
grep -q '^\[gain\] done in' "$T/log" || fail "no '[gain] done' line"
python3 - "$T/out/result.json" <<'PY' || fail "result.json"
import json, sys
r = json.load(open(sys.argv[1]))
items = {i["name"]: i for i in r["items"]}
g = items["gain"]["value"]
a = items["audio_gain"]
assert a["kind"] == "audio" and a["frames"] == 16000 and a["rate"] == 16000, a
assert g["gain"] == 0.5, g
assert 0.3 < g["rms_in"] < 0.4, g  # a 440 Hz sine at half scale: 0.3536
assert abs(g["rms_out"] - g["rms_in"] / 2) < 1e-4, g
print("gain: rms %.4f -> %.4f" % (g["rms_in"], g["rms_out"]))
PY
# `ebb pipelines` shows the entry as a worker (resolved against the config's
# directory), not as a missing stage
"$EBB" pipelines --config "$EBB_SOURCE_DIR/examples/workers/gain.json" > "$T/pipelines" 2>&1
grep -q "gain  timeout 60 s  worker $EBB_SOURCE_DIR/examples/workers/gain_worker.py\$" "$T/pipelines" ||
  fail "ebb pipelines: $(grep -A3 '^gain' "$T/pipelines")"
grep -q "missing" "$T/pipelines" && fail "ebb pipelines calls a stage missing: $(cat "$T/pipelines")"
# a bad option is the worker's to refuse (EBB_ECONFIG): bad input, exit 2, its message
sed 's/"gain": 0.5/"gain": 0.5, "colour": 1/' "$EBB_SOURCE_DIR/examples/workers/gain.json" \
  | sed "s#\./gain_worker.py#$EBB_SOURCE_DIR/examples/workers/gain_worker.py#" > "$T/bad.json"
"$EBB" run --pipeline gain --config "$T/bad.json" "$T/tone.wav" -o "$T/out2" --no-cache \
  --device cpu > "$T/log2" 2>&1
rc=$?
[ $rc -eq 2 ] || fail "bad option: exit $rc, expected 2 (bad configuration)"
grep -q "unknown option(s) colour" "$T/log2" || fail "bad option: $(cat "$T/log2")"
# Two workers in a row: the first's output audio goes on to the second
# without a copy: the host took the first's file over and hands the second
# the same file under its prefix (a second link to it), and the second
# reads the halved signal from it.
cat > "$T/probe_worker.py" <<PY
import os, sys
sys.path.insert(0, "$EBB_SOURCE_DIR/python")
from ebb.worker import Stage, serve
class Probe(Stage):
    name = "probe"
    def run(self, items, ctx):
        a = items["audio_gain"]
        st = os.stat("/dev/shm/" + a.raw["shm"])
        peak = max(abs(float(x)) for x in a.data.reshape(-1)[:4000]) if hasattr(a.data, "reshape") \
            else max(abs(x) for x in list(a.data)[:4000])
        return [ctx.json("probe", {"nlink": st.st_nlink, "size": st.st_size, "peak": peak,
                                   "name": a.raw["shm"]})]
sys.exit(serve(Probe))
PY
cat > "$T/chain.json" <<JSON
{"pipelines": {"chain": {"stages": [
  {"stage": "decode"},
  {"stage": "gain", "worker": "$EBB_SOURCE_DIR/examples/workers/gain_worker.py", "options": {"gain": 0.5}},
  {"stage": "probe", "worker": "python3", "worker_args": ["$T/probe_worker.py"]}]}}}
JSON
"$EBB" run --pipeline chain --config "$T/chain.json" "$T/tone.wav" -o "$T/out3" --no-cache \
  --device cpu > "$T/log3" 2>&1 &
ebb_pid=$!
wait $ebb_pid
rc=$?
[ $rc -eq 0 ] || fail "chain: ebb run exited $rc: $(cat "$T/log3")"
python3 - "$T/out3/result.json" <<'PY' || fail "chain: result.json"
import json, sys
r = json.load(open(sys.argv[1]))
p = {i["name"]: i for i in r["items"]}["probe"]["value"]
assert p["nlink"] == 2, "the second worker's input is not the first one's file (links %r)" % p
assert p["size"] == 16000 * 4, p
assert 0.24 < p["peak"] < 0.26, p  # half of a half-scale sine
print("chain: handed over by name, %d links, peak %.3f" % (p["nlink"], p["peak"]))
PY
ls /dev/shm | grep -q "^ebb-h$ebb_pid-" &&
  fail "taken payloads left behind: $(ls /dev/shm | grep "^ebb-h$ebb_pid-")"
ls /dev/shm | grep -q "^ebb-w" && fail "shared memory left behind: $(ls /dev/shm | grep '^ebb-w')"
[ $fails -eq 0 ] && echo "worker_python: ok"
exit $((fails > 0))
