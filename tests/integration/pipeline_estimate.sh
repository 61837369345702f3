#!/usr/bin/env bash
# Issue 17: declared needs. `ebb stages` shows each stage's estimate; after
# every run the runner compares it with the measured device peak (the
# stage_done event's estimate_bytes and peak_bytes). For synthetic (exact),
# separate and pitch the estimate is within 10 % of the measured peak on the
# fake GPU, on the demo song (build/samples/demo.wav, as scripts/demo.sh
# uses it) and on a 5-minute input (the demo song repeated; 2 minutes under
# the sanitizers, where the 5-minute run alone took 396 s of the 600 s limit).
# pitch's declared host bytes per second, times that input's length, are
# within 10 % of its measured host peak.
set -u
: "${EBB:?}" "${EBB_BUILD_DIR:?}"
. "$(dirname "$0")/../lib/fakegpu.sh"
unset EBB_STAGE_HOOK
WAV=$EBB_BUILD_DIR/samples/demo.wav
[ -f "$WAV" ] || { echo "FAIL: $WAV missing (the build makes it)"; exit 1; }

# ebb stages: the declared needs, text and JSON
"$EBB" stages > "$T/stages.txt" || fail "ebb stages exited $?"
grep -A3 '^synthetic ' "$T/stages.txt" | grep -q 'needs (declared, default options): device 320.0 MiB' ||
  fail "ebb stages does not show synthetic's estimate (256 + 64 MiB): $(grep -A3 '^synthetic' "$T/stages.txt")"
grep -A3 '^separate ' "$T/stages.txt" | grep -qE '\+ 1\.4[0-9] MiB device .* per second of audio' ||
  fail "ebb stages does not show separate's ~1.47 MiB per second"
"$EBB" stages --json | python3 -c '
import json, sys
st = {s["name"]: s for s in json.load(sys.stdin)}
e = st["synthetic"]["estimate"]
assert e["device_bytes"] == 320 << 20, e
assert st["pitch"]["estimate"]["device_bytes_per_s"] > 0, st["pitch"]
assert st["decode"]["estimate"] is None' || fail "ebb stages --json: estimates"

LONG_S=300
[ "${EBB_TEST_SLOWDOWN:-1}" -gt 1 ] && LONG_S=120
python3 - "$WAV" "$T/five.wav" "$LONG_S" <<'PY' || { echo "FAIL: cannot make the $LONG_S s input"; exit 1; }
import sys, wave
w = wave.open(sys.argv[1]); p = w.getparams(); d = w.readframes(w.getnframes()); w.close()
need = int(sys.argv[3]) * p.framerate * p.sampwidth * p.nchannels
o = wave.open(sys.argv[2], "wb"); o.setparams(p); o.writeframes((d * (need // len(d) + 1))[:need]); o.close()
PY

cat > "$T/cfg.json" <<'JSON'
{"pipelines": {
  "syn": {"stages": [
    {"stage": "synthetic", "name": "a", "cache": false,
     "options": {"weights_mib": 100, "activations_mib": 30, "cache_mib": 20, "leak_mib": 3, "touch": "sample"}},
    {"stage": "synthetic", "name": "b", "cache": false, "isolate": true,
     "options": {"weights_mib": 40, "activations_mib": 10, "touch": "sample"}}]},
  "audio": {"stages": [{"stage": "decode"}, {"stage": "separate"}, {"stage": "pitch"}]}}}
JSON

# check LOG STAGE...: estimate_bytes within 10 % of peak_bytes (exact when =)
check() {
  python3 - "$@" <<'PY'
import json, sys
log, want = sys.argv[1], sys.argv[2:]
done = {}
for l in open(log):
    try: e = json.loads(l)
    except ValueError: continue
    if e.get("event") == "stage_done": done[e["stage"]] = e
ok = True
for w in want:
    exact = w.endswith("=")
    s = w.rstrip("=")
    e = done.get(s)
    if not e:
        print("FAIL: %s: no stage_done for %s" % (log, s)); ok = False; continue
    est, peak = e.get("estimate_bytes", 0), e["peak_bytes"]
    off = (est - peak) / peak if peak else 1
    print("%s: %s estimate %d bytes, measured peak %d bytes (%+.1f %%)" % (log, s, est, peak, off * 100))
    if peak == 0 or abs(off) > (0 if exact else 0.10):
        print("FAIL: %s: %s's estimate is off" % (log, s)); ok = False
sys.exit(0 if ok else 1)
PY
}

"$EBB" run --pipeline syn --config "$T/cfg.json" --device cuda --no-cache --log-format json \
  -o "$T/out" "$WAV" > "$T/syn.log" 2>&1 || fail "syn: ebb run exited $?: $(tail -3 "$T/syn.log")"
check "$T/syn.log" a= b= || fail "synthetic's estimate is not exact"

for input in "$WAV" "$T/five.wav"; do
  name=$(basename "$input" .wav)
  "$EBB" run --pipeline audio --config "$T/cfg.json" --device cuda --no-cache --log-format json \
    --verbose -o "$T/out-$name" "$input" > "$T/$name.log" 2>&1 ||
    fail "$name: ebb run exited $?: $(tail -3 "$T/$name.log")"
  check "$T/$name.log" separate pitch || fail "$name: an estimate is more than 10 % off"
done

# pitch's host figure: its declared bytes per second (`ebb stages --json`,
# default options, no input) times the long input's length, within 10 % of
# the host peak the runner measured (the salience rows and pYIN's back
# pointers were left out of it until session 9: 0.28 MiB/s for 0.82)
"$EBB" stages --json > "$T/stages.json" || fail "ebb stages --json exited $?"
python3 - "$T/stages.json" "$T/five.log" "$LONG_S" <<'PY' || fail "pitch's host estimate is more than 10 % off"
import json, sys
st = {s["name"]: s for s in json.load(open(sys.argv[1]))}
est = st["pitch"]["estimate"]["host_bytes_per_s"] * float(sys.argv[3])
peak = None
for l in open(sys.argv[2]):
    try: e = json.loads(l)
    except ValueError: continue
    if e.get("event") == "stage_done" and e.get("stage") == "pitch": peak = e.get("host_peak_bytes")
if not peak:
    print("FAIL: no host_peak_bytes for pitch in", sys.argv[2]); sys.exit(1)
off = (est - peak) / peak
print("pitch host: estimate %.0f bytes, measured peak %d bytes (%+.1f %%)" % (est, peak, off * 100))
sys.exit(0 if abs(off) <= 0.10 else 1)
PY

[ "$fails" = 0 ] && echo "PASS" || echo "$fails failure(s)"
exit $((fails > 0))
