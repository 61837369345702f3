#!/usr/bin/env bash
# align's acoustic method (pocketsphinx) inside ebb run, on espeak-ng lines
# sung over accompaniment with known word times (build/lyricgen):
#  - lyrics that fit: every word placed acoustically (source "acoustic",
#    a confidence), onsets within 0.3 s, lyrics.lrc + lyrics.words.lrc;
#  - words the dictionary lacks: an English-looking one pronounced by
#    espeak-ng's letter-to-sound rules and aligned ("acoustic-lts"), one in
#    another script placed between its neighbours ("between"); both said in
#    the log; the others still acoustic;
#  - an empty lyrics file, and lyrics in another script (Cyrillic, CJK):
#    a clear log line, the job and its other outputs still written;
#  - another song's lyrics: "the lyrics do not fit the voice", every word
#    matched false with confidence under 0.3;
#  - a missing acoustic model: an error line naming pocketsphinx-en-us, the
#    words still placed (by spreading), the job and its outputs still there;
#  - method bogus: refused naming the option.
# Then with the test Whisper server and no lyrics, the transcript's words
# (times spread over the upload) are re-timed acoustically; method text
# keeps the transcript's times.
set -euo pipefail
. "$(dirname "$0")/../lib/stages.sh"
. "$(dirname "$0")/../lib/whisper.sh"
LYRICGEN="$EBB_BUILD_DIR/lyricgen"
[ -x "$LYRICGEN" ] || fail "no lyricgen at $LYRICGEN"
[ -r /usr/share/pocketsphinx/model/en-us/en-us/mdef ] ||
  fail "pocketsphinx-en-us is not installed (scripts/install-deps.sh installs it)"

"$LYRICGEN" --seed 3 --accomp-db -6 "$TMP" song "the night is long and the road is cold" \
  "i walk alone beneath the silver moon" >/dev/null || fail "lyricgen failed"

# run NAME ALIGN_OPTIONS_JSON [TRANSCRIBE_STAGE_JSON]: out in $TMP/NAME, log in $TMP/NAME.log
run() {
  local name=$1 opts=$2 tr=${3:-'{"stage": "transcribe"}'}
  cat >"$TMP/$name.cfg" <<EOF
{"pipelines": {"st": {"stages": [{"stage": "decode"}, {"stage": "separate"}, $tr,
  {"stage": "align", "options": $opts}, {"stage": "pitch"}, {"stage": "export"}]}}}
EOF
  (cd "$TMP" && "$EBB" run --config "$name.cfg" --pipeline st --device cpu --no-cache song.wav \
    -o "$name" >"$name.log" 2>&1)
}
outputs_written() { # NAME: the job's other outputs are there
  for f in songtrace.json melody.mid pitch.csv vocals.flac; do
    [ -s "$TMP/$1/$f" ] || fail "$1: $f not written: $(cat "$TMP/$1.log")"
  done
}
check() { # NAME PYTHON: asserts on lyrics (the songtrace.json item) and truth
  python3 - "$TMP/$1/songtrace.json" "$TMP/song.truth.json" "$2" <<'PY' ||
import json, sys
lyrics = json.load(open(sys.argv[1]))["lyrics"]
truth = json.load(open(sys.argv[2]))["words"]
words = lyrics["words"]
exec(sys.argv[3])
PY
    fail "$1: $(cat "$TMP/$1.log")"
}

# 1. the right lyrics
run fit '{"lyrics": "song.lyrics.txt"}' || fail "fit: run failed: $(cat "$TMP/fit.log")"
outputs_written fit
grep -qE '^\[align\] 16 of 16 words aligned acoustically in 2 of 2 line groups' "$TMP/fit.log" ||
  fail "fit: no summary line: $(cat "$TMP/fit.log")"
! grep -q "do not fit" "$TMP/fit.log" || fail "fit: the right lyrics said not to fit"
check fit '
assert lyrics["source"] == "acoustic", lyrics["source"]
assert [w["word"] for w in words] == [w["word"] for w in truth]
assert all(w["source"] == "acoustic" and w["matched"] and 0.3 <= w["confidence"] <= 1 for w in words), words
bad = [(w["word"], w["start"], t["start"]) for w, t in zip(words, truth)
       if not t["estimated"] and abs(w["start"] - t["start"]) > 0.3]
assert not bad, f"onsets off by more than 0.3 s: {bad}"'
grep -qE '^\[00:0[0-9]\.[0-9]{2}\]<00:0[0-9]\.[0-9]{2}>the <00:0' "$TMP/fit/lyrics.words.lrc" ||
  fail "fit: lyrics.words.lrc is not enhanced LRC: $(cat "$TMP/fit/lyrics.words.lrc")"
[ "$(wc -l <"$TMP/fit/lyrics.lrc")" = 2 ] || fail "fit: lyrics.lrc: $(cat "$TMP/fit/lyrics.lrc")"

# 2. words the dictionary lacks
printf 'the night is long and the road is cold\ni walk alone beneath the zorblaxian мoon\n' >"$TMP/oov.txt"
run oov '{"lyrics": "oov.txt"}' || fail "oov: run failed: $(cat "$TMP/oov.log")"
grep -q "^\[align\] 1 words not in the dictionary .*: pronounced by espeak-ng's letter-to-sound rules" \
  "$TMP/oov.log" || fail "oov: no log line for the spelled word: $(cat "$TMP/oov.log")"
grep -q '^\[align\] 1 words with no pronunciation .*: placed between their neighbours' \
  "$TMP/oov.log" || fail "oov: no log line for the word in another script: $(cat "$TMP/oov.log")"
check oov '
z = words[-2]
assert z["word"] == "zorblaxian" and z["source"] == "acoustic-lts", z
m = words[-1]
assert m["source"] == "between" and not m["matched"] and m["confidence"] == 0, m
assert z["end"] - 1e-6 <= m["start"] <= m["end"], words[-2:]
assert sum(w["source"] == "acoustic" for w in words) == 14, words'

# 3. an empty lyrics file
: >"$TMP/empty.txt"
run empty '{"lyrics": "empty.txt"}' || fail "empty: run failed: $(cat "$TMP/empty.log")"
grep -q '^\[align\] option lyrics: empty.txt has no words; aligning without lyrics$' \
  "$TMP/empty.log" || fail "empty: no clear log line: $(cat "$TMP/empty.log")"
outputs_written empty

# 4. lyrics in another script
printf 'ночь длинна и дорога холодна\n夜は長い\n' >"$TMP/other.txt"
run other '{"lyrics": "other.txt"}' || fail "other: run failed: $(cat "$TMP/other.log")"
outputs_written other
grep -q 'did not align acoustically; placed by spreading its words evenly' "$TMP/other.log" ||
  fail "other: no fallback line: $(cat "$TMP/other.log")"
grep -q 'the lyrics do not fit the voice' "$TMP/other.log" || fail "other: no fit line"
check other '
assert len(words) == 6, words
assert all(not w["matched"] and w["source"] == "spread" for w in words), words'

# 5. another song's lyrics
printf 'there is a fire burning in my heart\nso sing it loud and let the music play\n' >"$TMP/wrong.txt"
run wrong '{"lyrics": "wrong.txt"}' || fail "wrong: run failed: $(cat "$TMP/wrong.log")"
outputs_written wrong
grep -qE '^\[align\] the lyrics do not fit the voice: ' "$TMP/wrong.log" ||
  fail "wrong: no log line saying the lyrics do not fit: $(cat "$TMP/wrong.log")"
check wrong '
assert all(not w["matched"] and w["confidence"] < 0.3 for w in words), words'

# 6. no acoustic model: the error names the package, the job goes on
run nomodel '{"lyrics": "song.lyrics.txt", "acoustic_model": "/nonexistent/model"}' ||
  fail "nomodel: the job failed: $(cat "$TMP/nomodel.log")"
grep -q 'acoustic alignment unavailable: .*/nonexistent/model.*pocketsphinx-en-us' \
  "$TMP/nomodel.log" || fail "nomodel: the error does not name the package: $(cat "$TMP/nomodel.log")"
outputs_written nomodel
check nomodel '
assert lyrics["source"] == "spread" and "pocketsphinx-en-us" in lyrics["note"], lyrics
assert all(not w["matched"] for w in words)'

# 7. a bad method
if run badmethod '{"lyrics": "song.lyrics.txt", "method": "guess"}'; then
  fail "method guess was accepted"
fi
grep -q 'method="guess" must be acoustic or text' "$TMP/badmethod.log" ||
  fail "badmethod: $(cat "$TMP/badmethod.log")"

# 8. the transcript's words (the test Whisper server: "hello from whisper
# test server" spread over the upload) re-timed against the voice
"$LYRICGEN" --seed 5 --accomp-db -6 "$TMP" hello "hello from whisper test server" >/dev/null
cp "$TMP/hello.wav" "$TMP/song.wav"
cp "$TMP/hello.truth.json" "$TMP/song.truth.json"
start_whisper "$TMP/server.out"
TR="{\"stage\": \"transcribe\", \"options\": {\"url\": \"http://127.0.0.1:$PORT/inference\"}}"
run retime '{}' "$TR" || fail "retime: run failed: $(cat "$TMP/retime.log")"
run textm '{"method": "text"}' "$TR" || fail "textm: run failed: $(cat "$TMP/textm.log")"
python3 - "$TMP/retime/songtrace.json" "$TMP/textm/songtrace.json" "$TMP/song.truth.json" <<'PY' ||
import json, sys
a = json.load(open(sys.argv[1]))["lyrics"]; t = json.load(open(sys.argv[2]))["lyrics"]
truth = json.load(open(sys.argv[3]))["words"]
assert a["source"] == "acoustic" and t["source"] == "transcript", (a["source"], t["source"])
names = [w["word"] for w in truth]
assert [w["word"].strip(" .").lower() for w in a["words"]] == names, a["words"]
assert all(w["source"] == "acoustic" for w in a["words"]), a["words"]
err_a = [abs(w["start"] - x["start"]) for w, x in zip(a["words"], truth) if not x["estimated"]]
err_t = [abs(w["start"] - x["start"]) for w, x in zip(t["words"], truth) if not x["estimated"]]
print("re-timed onset errors", [round(e, 3) for e in err_a], "transcript's", [round(e, 3) for e in err_t])
assert max(err_a) <= 0.3, err_a
assert sum(err_a) < sum(err_t), "re-timing did not bring the words closer to the voice"
assert "confidence" not in t["words"][0], t["words"][0]
PY
  fail "retime: $(cat "$TMP/retime.log")"
echo ok
