#!/usr/bin/env bash
# The pitch, align and export stages inside `ebb run --pipeline songtrace` on a
# generated song with ground truth (build/songgen): the output files are there
# and well-formed, the f0 track of the separated vocals matches the truth
# (raw pitch accuracy and notes above a floor), and on the fake GPU the pitch
# kernel runs (its host twin) and gives the same pitch.csv as the CPU device.
set -euo pipefail
. "$(dirname "$0")/../lib/stages.sh"
SONGGEN="$EBB_BUILD_DIR/songgen"
[ -x "$SONGGEN" ] || fail "no songgen at $SONGGEN"

# the vowel voice: the melody floors below were set on it (the worded
# voice, with consonants, is scored in docs/songtrace.md)
"$SONGGEN" --voice vowels --seed 4 --seconds 14 "$TMP" song >/dev/null || fail "songgen failed"

"$EBB" run --pipeline songtrace "$TMP/song.wav" -o "$TMP/cpu" --device cpu --no-cache \
  >"$TMP/cpu.log" 2>&1 || { cat "$TMP/cpu.log"; fail "ebb run on the CPU failed"; }
for f in songtrace.json melody.mid pitch.csv; do
  [ -s "$TMP/cpu/$f" ] || fail "no $f in the output directory"
done
[ ! -e "$TMP/cpu/lyrics.lrc" ] || fail "lyrics.lrc written without lyric words"
grep -q "\[pitch\] vocals: .* d' by cpu, pyin" "$TMP/cpu.log" || fail "pitch did not say it ran on the CPU"
grep -q "\[align\] no transcript" "$TMP/cpu.log" || fail "align did not report the missing transcript"

python3 - "$TMP/song.truth.json" "$TMP/cpu" <<'PY' || fail "output check failed"
import csv, json, math, struct, sys
truth = json.load(open(sys.argv[1])); out = sys.argv[2]
mid = open(out + "/melody.mid", "rb").read()
assert mid[:4] == b"MThd" and struct.unpack(">IHHH", mid[4:14]) == (6, 0, 1, 480), "MIDI header"
assert mid[14:18] == b"MTrk" and mid.endswith(b"\xff\x2f\x00"), "MIDI track"
rows = list(csv.DictReader(open(out + "/pitch.csv")))
doc = json.load(open(out + "/songtrace.json"))
assert doc["f0"]["frames"] == len(rows), "CSV rows vs f0 frames"
assert doc["lyrics"]["source"] == "vad" and doc["transcript"] is None
hz = truth["f0"]["hz"]; tv = ok = 0
for i, h in enumerate(hz):
    e = float(rows[i]["f0_hz"]) if i < len(rows) else 0.0
    if h > 0:
        tv += 1
        ok += e > 0 and abs(1200 * math.log2(e / h)) < 50
rpa = ok / tv
hit = sum(any(abs(m["onset"] - n["onset"]) <= 0.05 and m["midi"] == n["midi"] for m in doc["notes"])
          for n in truth["notes"])
frac = hit / len(truth["notes"])
# notes wholly in the song's rests (the band alone): 1 with the pitch
# stage's salience_mix off, 2 with it, 4 when it filled the rests and the
# gaps between notes too (its first version, issue 16)
rest = [m for m in doc["notes"]
        if not any(n["onset"] < m["offset"] and m["onset"] < n["offset"] for n in truth["notes"])]
print(f"separated vocals: RPA {rpa:.3f}, notes {hit}/{len(truth['notes'])} ({len(doc['notes'])} estimated, "
      f"{len(rest)} in rests)")
assert rpa >= 0.85, f"raw pitch accuracy {rpa:.3f} < 0.85"
assert frac >= 0.7, f"only {hit} of {len(truth['notes'])} notes found"
assert len(rest) <= 2, f"{len(rest)} notes in the rests: " + ", ".join(
    f"{m['onset']:.2f} s midi {m['midi']}" for m in rest)
PY

# the fake GPU: the kernel (host twin) computes d'; same result as the CPU
"$EBB" run --pipeline songtrace "$TMP/song.wav" -o "$TMP/gpu" --device cuda --no-cache \
  >"$TMP/gpu.log" 2>&1 || { cat "$TMP/gpu.log"; fail "ebb run on the fake GPU failed"; }
grep -q "\[pitch\] vocals: .* d' by gpu kernel" "$TMP/gpu.log" || { cat "$TMP/gpu.log"; fail "pitch did not use the kernel"; }
grep -q "\[pitch\] leaked" "$TMP/gpu.log" && fail "pitch leaked device memory"
cmp -s "$TMP/cpu/pitch.csv" "$TMP/gpu/pitch.csv" || fail "pitch.csv differs between CPU and fake GPU"
echo "ok"
