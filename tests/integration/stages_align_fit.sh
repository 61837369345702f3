#!/usr/bin/env bash
# align's fit check on voices it was not tuned on (issue 43; label long):
# the dev set's flite songs (bench/lyrics_devset.py: flite's male and female
# voices re-sung by PSOLA over strings, bass and drums, accompaniment -6 dB;
# the check's threshold was chosen on espeak-ng alone, then kept at 3.0
# where espeak-ng alone gave 2.5 because flite-m-0 with flite-m-1's lyrics
# below reached 2.6), scope phrases.
#  - each song with its own lyrics: the lyrics fit (no "do not fit" line)
#    and at least 75 % of all the words are matched (measured: 62 of 62);
#  - each song with the lyrics of the other flite song of its voice (4
#    other lines: flite-m-0 / flite-m-1, flite-f-0 / flite-f-1; the male and
#    female songs share a line, "we built a castle out of sand and dreams",
#    so they are not another song's lyrics): the log says "the lyrics do not
#    fit the voice" and at least 90 % of the words are matched false
#    (measured: 56 of 56);
#  - flite-f-0 at 0 dB with its own lyrics and the phrases of the
#    periodicity gate (vad_phrases periodic): the plan pairs its third
#    line with a voice phrase too short for its words, so that line does
#    not align there; it is aligned a second time over the stretch between
#    its neighbours (log: "aligned on a second try"), its words placed
#    acoustically within 0.3 s of their notes (at least 6 of 9; measured
#    7) and not matched. (Until 2026-12-08 this was flite-m-0's voice
#    alone, its second line: 7 of 8, spread evenly before the second try 3
#    of 8; since the rests inside a pairing cost in the plan, issue 43,
#    that line has a phrase of its own and aligns there.)
set -euo pipefail
. "$(dirname "$0")/../lib/stages.sh"
SRC="$(cd "$(dirname "$0")/../.." && pwd)"
flite_devset "$SRC"
run() { # NAME WAV LYRICS [VAD_PHRASES]
  cat >"$1.cfg" <<CFG
{"pipelines": {"st": {"stages": [{"stage": "decode"}, {"stage": "separate"},
  {"stage": "align", "options": {"lyrics": "$3", "vad_phrases": "${4:-level}"}},
  {"stage": "export", "options": {"formats": "json"}}]}}}
CFG
  "$EBB" run --config "$1.cfg" --pipeline st --device cpu --no-cache "$2" -o "$1" >"$1.log" 2>&1 ||
    fail "$1: run failed: $(cat "$1.log")"
}
count() { # DIR -> "matched words"
  python3 -c 'import json,sys; w=json.load(open(sys.argv[1]+"/songtrace.json"))["lyrics"]["words"]
print(sum(bool(x["matched"]) for x in w), len(w))' "$1"
}
rm_=0 rn=0 wu=0 wn=0
for pair in "flite-m-0 flite-m-1" "flite-f-0 flite-f-1"; do
  set -- $pair
  run "$1.right" "dev/$1.mix6.wav" "dev/$1.lyrics.txt"
  run "$1.wrong" "dev/$1.mix6.wav" "dev/$2.lyrics.txt"
  ! grep -q "do not fit the voice" "$1.right.log" ||
    fail "$1 with its own lyrics: judged not fitting: $(grep 'align\]' "$1.right.log")"
  grep -q "the lyrics do not fit the voice" "$1.wrong.log" ||
    fail "$1 with $2's lyrics: no 'do not fit' line: $(grep 'align\]' "$1.wrong.log")"
  read -r m n < <(count "$1.right")
  rm_=$((rm_ + m)) rn=$((rn + n))
  read -r m n < <(count "$1.wrong")
  wu=$((wu + n - m)) wn=$((wn + n))
done
run f0.mix0 dev/flite-f-0.mix0.wav dev/flite-f-0.lyrics.txt periodic
grep -q "1 line groups aligned on a second try" f0.mix0.log ||
  fail "flite-f-0, 0 dB: no line aligned on a second try: $(grep 'align\]' f0.mix0.log)"
read -r near acou matched < <(python3 -c 'import json,sys
w=[x for x in json.load(open("f0.mix0/songtrace.json"))["lyrics"]["words"] if x["line"] == 2]
t=[x for x in json.load(open("dev/flite-f-0.truth.json"))["words"] if x["line"] == 2]
print(sum(abs(a["start"]-b["start"]) <= 0.3 for a, b in zip(w, t)),
      sum(a["source"] == "acoustic" for a in w), sum(bool(a["matched"]) for a in w))')
echo "flite-f-0 at 0 dB, line 3 (second try): $near of 9 onsets within 0.3 s, $acou acoustic, $matched matched"
[ "$acou" -eq 9 ] || fail "line 3 of flite-f-0: $acou of 9 words placed acoustically (want 9)"
[ "$near" -ge 6 ] || fail "line 3 of flite-f-0: only $near of 9 onsets within 0.3 s (want 6)"
[ "$matched" -eq 0 ] || fail "line 3 of flite-f-0: $matched words matched after a second try (want 0)"
echo "own lyrics: $rm_ of $rn words matched; another song's: $wu of $wn words matched false"
[ $((rm_ * 100)) -ge $((rn * 75)) ] || fail "own lyrics: only $rm_ of $rn words matched (want 75 %)"
[ $((wu * 100)) -ge $((wn * 90)) ] || fail "another song's lyrics: only $wu of $wn words matched false (want 90 %)"
echo "stages_align_fit: ok"
