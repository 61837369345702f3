#!/usr/bin/env bash
# align's acoustic method never gives a word a time outside the audio, and
# never counts a word no audio backs as aligned (issue 43), with both scopes
# (phrases, song):
#  - no voice at all (digital silence): every word inside [0, duration],
#    none matched, "the lyrics do not fit the voice";
#  - only accompaniment (songgen's accompaniment stem): the same;
#  - the voice in the last second (accompaniment, "hold on" sung from 7.0 s
#    of 8 s): inside the audio; with scope phrases both words matched within
#    0.3 s of the truth;
#  - lyrics longer than the song (15 more words than are sung): inside the
#    audio, and with scope song the words no window reached are unmatched
#    and said in the log;
#  - scope bogus: refused naming the option.
set -euo pipefail
. "$(dirname "$0")/../lib/stages.sh"
B="$EBB_BUILD_DIR"
[ -x "$B/lyricgen" ] && [ -x "$B/songgen" ] || fail "no lyricgen/songgen in $B"
[ -r /usr/share/pocketsphinx/model/en-us/en-us/mdef ] ||
  fail "pocketsphinx-en-us is not installed (scripts/install-deps.sh installs it)"
cd "$TMP"
"$B/lyricgen" --seed 3 --accomp-db -6 . song "the night is long and the road is cold" \
  "i walk alone beneath the silver moon" >/dev/null || fail "lyricgen failed"
"$B/lyricgen" --seed 4 . last "hold on" >/dev/null || fail "lyricgen failed"
"$B/songgen" --seed 2 --seconds 12 . acc >/dev/null || fail "songgen failed"
printf 'near the window my heart will fall\nso slow the river sings my heart fall\n' >more.txt
cat song.lyrics.txt more.txt >long.txt
python3 - <<'PY' || fail "could not build the inputs"
import array, json, wave
def rd(p):
    w = wave.open(p); return array.array("h", w.readframes(w.getnframes()))
def wr(p, a):
    w = wave.open(p, "wb"); w.setnchannels(1); w.setsampwidth(2); w.setframerate(16000)
    w.writeframes(a.tobytes())
acc, v = rd("acc.accompaniment.wav"), rd("last.vocals.wav")
t = json.load(open("last.truth.json"))["words"]
s, e = int((t[0]["start"] - 0.05) * 16000), int((t[-1]["end"] + 0.05) * 16000)
n = 7 * 16000 + (e - s)
out = array.array("h", (acc[i] // 2 for i in range(n)))
for i in range(e - s):
    out[7 * 16000 + i] = max(-32768, min(32767, out[7 * 16000 + i] + v[s + i]))
wr("lastsec.wav", out)
wr("silent.wav", array.array("h", bytes(2 * 8 * 16000)))
wr("accomp.wav", acc)
json.dump({"words": [dict(w, start=w["start"] - t[0]["start"] + 7.05) for w in t]},
          open("lastsec.truth.json", "w"))
PY

# run NAME WAV LYRICS SCOPE: out in NAME/, log in NAME.log
run() {
  cat >"$1.cfg" <<EOF
{"pipelines": {"st": {"stages": [{"stage": "decode"}, {"stage": "separate"},
  {"stage": "align", "options": {"lyrics": "$3", "scope": "$4"}}, {"stage": "export"}]}}}
EOF
  "$EBB" run --config "$1.cfg" --pipeline st --device cpu --no-cache "$2" -o "$1" >"$1.log" 2>&1 ||
    fail "$1: run failed: $(cat "$1.log")"
}
# check NAME WAV PYTHON: every word inside the audio, then the asserts
check() {
  python3 - "$1/songtrace.json" "$2" "$3" <<'PY' || fail "$1: $(cat "$1.log")"
import json, sys, wave
w = wave.open(sys.argv[2]); dur = w.getnframes() / w.getframerate()
words = json.load(open(sys.argv[1]))["lyrics"]["words"]
out = [(x["word"], x["start"], x["end"]) for x in words
       if not (0 <= x["start"] <= x["end"] <= dur + 0.0005)]
assert not out, f"word times outside the audio (0..{dur:.3f} s): {out}"
exec(sys.argv[3])
PY
}
for scope in phrases song; do
  for input in silent accomp; do
    run "$input.$scope" "$input.wav" song.lyrics.txt "$scope"
    check "$input.$scope" "$input.wav" '
m = [x["word"] for x in words if x["matched"]]
assert len(words) == 16 and not m, f"words matched with no voice in the audio: {m}"'
    grep -q "the lyrics do not fit the voice" "$input.$scope.log" ||
      fail "$input.$scope: no 'do not fit' line: $(cat "$input.$scope.log")"
  done
  run "lastsec.$scope" lastsec.wav last.lyrics.txt "$scope"
  check "lastsec.$scope" lastsec.wav "
t = json.load(open('lastsec.truth.json'))['words']
if '$scope' == 'phrases':
    bad = [(x['word'], x['start'], y['start']) for x, y in zip(words, t)
           if not x['matched'] or abs(x['start'] - y['start']) > 0.3]
    assert not bad, f'the last second: words off or unmatched: {bad}'"
  run "long.$scope" song.wav long.txt "$scope"
  check "long.$scope" song.wav "
assert len(words) == 31, len(words)
if '$scope' == 'song':
    late = [x['word'] for x in words[16:] if x['matched']]
    assert len(late) <= 2, f'words past the end of the singing matched: {late}'"
done
grep -qE '^\[align\] [0-9]+ of 31 words were not heard in the vocals' long.song.log ||
  fail "long.song: no log line for the words not heard: $(cat long.song.log)"
cat >bogus.cfg <<'EOF'
{"pipelines": {"st": {"stages": [{"stage": "decode"}, {"stage": "align", "options": {"scope": "all"}}]}}}
EOF
if "$EBB" run --config bogus.cfg --pipeline st --device cpu silent.wav -o bogus >bogus.log 2>&1; then
  fail "scope all was accepted"
fi
grep -q 'option scope="all" must be phrases or song' bogus.log || fail "scope all: $(cat bogus.log)"
echo "stages_align_edges: ok"
