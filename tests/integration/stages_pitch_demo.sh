#!/usr/bin/env bash
# End-to-end quality of `ebb run --pipeline songtrace` on the demo song's
# melody (songgen seed 1, 26 s, the same notes as build/samples/demo.wav)
# sung with the vowel voice the floors were set on, on the CPU device, scored
# against its truth. (The demo itself sings words since issue 36; its melody
# figures with consonants are in docs/songtrace.md.) What the align and pitch stages see here are the
# `separate` stage's vocals, with accompaniment residue in the rests:
#  - phrases: align's voice-activity phrases vs the truth's phrases (notes
#    joined across gaps of at most 300 ms): count within +-1;
#  - notes: estimated count within -25 % .. +25 % of the truth, and truth notes
#    found (an estimated note with onset within 50 ms and the same MIDI
#    number) at least 85 %;
#  - the f0 track: raw pitch accuracy (50 cents) >= 0.85, voicing false alarm
#    (truth-unvoiced frames reported voiced) <= 0.2.
# Before the VAD periodicity cue and the pitch note gate this run gave 1 phrase,
# 51 notes and a false alarm of 0.47 (see docs/songtrace.md).
set -euo pipefail
. "$(dirname "$0")/../lib/stages.sh"
DEMO="$TMP/demo"
"$EBB_BUILD_DIR/songgen" --voice vowels --seed 1 --rate 16000 --seconds 26 "$TMP" demo >/dev/null ||
  fail "songgen failed"

"$EBB" run --pipeline songtrace "$DEMO.wav" -o "$TMP/out" --device cpu --no-cache \
  >"$TMP/run.log" 2>&1 || { cat "$TMP/run.log"; fail "ebb run on the CPU failed"; }

python3 - "$DEMO.truth.json" "$TMP/out" <<'PY' || fail "quality floors not met (figures above)"
import csv, json, math, sys
truth = json.load(open(sys.argv[1])); out = sys.argv[2]
doc = json.load(open(out + "/songtrace.json"))
rows = list(csv.DictReader(open(out + "/pitch.csv")))
tn = sorted(truth["notes"], key=lambda n: n["onset"])
phr = []
for n in tn:
    if phr and n["onset"] - phr[-1][1] <= 0.3:
        phr[-1][1] = max(phr[-1][1], n["offset"])
    else:
        phr.append([n["onset"], n["offset"]])
est_ph = doc["lyrics"]["phrases"]
est = doc["notes"]
hit = sum(any(abs(m["onset"] - n["onset"]) <= 0.05 and m["midi"] == n["midi"] for m in est)
          for n in tn)
hz = truth["f0"]["hz"]; tv = ok = tu = fa = 0
for i, h in enumerate(hz):
    e = float(rows[i]["f0_hz"]) if i < len(rows) else 0.0
    if h > 0:
        tv += 1
        ok += e > 0 and abs(1200 * math.log2(e / h)) < 50
    else:
        tu += 1
        fa += e > 0
rpa, vfa = ok / tv, fa / tu
print(f"demo (separated vocals): phrases {len(est_ph)} (truth {len(phr)}); "
      f"notes {len(est)} estimated (truth {len(tn)}), {hit} found ({hit / len(tn):.3f}); "
      f"RPA {rpa:.3f}, VFA {vfa:.3f}")
for p in est_ph:
    print(f"  phrase {p['start']:.2f}-{p['end']:.2f}")
bad = []
if abs(len(est_ph) - len(phr)) > 1:
    bad.append(f"{len(est_ph)} phrases, truth {len(phr)} (allowed +-1)")
if not (0.75 * len(tn) <= len(est) <= 1.25 * len(tn)):
    bad.append(f"{len(est)} notes, truth {len(tn)} (allowed -25 %..+25 %)")
if hit < 0.85 * len(tn):
    bad.append(f"only {hit} of {len(tn)} truth notes found (floor 85 %)")
if rpa < 0.85:
    bad.append(f"raw pitch accuracy {rpa:.3f} < 0.85")
if vfa > 0.2:
    bad.append(f"voicing false alarm {vfa:.3f} > 0.2")
for b in bad:
    print("  " + b)
sys.exit(1 if bad else 0)
PY
echo "ok"
