#!/usr/bin/env bash
# align (method text: the lyrics matched to the transcript by spelling) +
# export in a songtrace pipeline with a transcript (the test Whisper
# server's canned "hello from whisper test server") and a lyrics file with an
# extra word and two lines: the lyric words are matched (punctuation aside),
# the extra word is interpolated between its neighbours with matched false,
# and export writes lyrics.lrc with one [mm:ss.xx] line per lyric line.
set -euo pipefail
. "$(dirname "$0")/../lib/stages.sh"
. "$(dirname "$0")/../lib/whisper.sh"
SONGGEN="$EBB_BUILD_DIR/songgen"
[ -x "$SONGGEN" ] || fail "no songgen at $SONGGEN"

start_whisper "$TMP/server.out"

"$SONGGEN" --seed 2 --seconds 10 "$TMP" song >/dev/null || fail "songgen failed"
printf '[Verse]\nHello from the\n\nwhisper test server\n' >"$TMP/lyrics.txt"
cat >"$TMP/cfg.json" <<EOF2
{"pipelines": {"st": {"stages": [{"stage": "decode"}, {"stage": "separate"},
  {"stage": "transcribe", "options": {"url": "http://127.0.0.1:$PORT/inference"}},
  {"stage": "align", "options": {"lyrics": "lyrics.txt", "method": "text"}},
  {"stage": "pitch"}, {"stage": "export"}]}}}
EOF2
# the lyrics path is relative: resolved against the current directory
(cd "$TMP" && "$EBB" run --config cfg.json --pipeline st --device cpu --no-cache song.wav -o out \
  >run.log 2>&1) || fail "run failed: $(cat "$TMP/run.log")"
grep -q '^\[align\] 5 of 6 lyric words matched to 5 transcript words$' "$TMP/run.log" ||
  fail "no match line: $(cat "$TMP/run.log")"
[ -s "$TMP/out/lyrics.lrc" ] || fail "no lyrics.lrc"
python3 - "$TMP/out" <<'PY' || fail "lyrics check failed: $(cat "$TMP/out/lyrics.lrc")"
import json, re, sys
out = sys.argv[1]
lines = open(out + "/lyrics.lrc").read().splitlines()
assert len(lines) == 2, lines
pat = re.compile(r"^\[(\d\d):(\d\d)\.(\d\d)\](.*)$")
ts = []
for l in lines:
    m = pat.match(l)
    assert m, l
    ts.append(int(m[1]) * 60 + int(m[2]) + int(m[3]) / 100)
assert [pat.match(l)[4] for l in lines] == ["Hello from the", "whisper test server"], lines
assert ts[0] < ts[1], ts
ly = json.load(open(out + "/songtrace.json"))["lyrics"]
assert ly["source"] == "transcript+lyrics", ly["source"]
w = ly["words"]
assert [x["matched"] for x in w] == [True, True, False, True, True, True], w
assert [x["line"] for x in w] == [0, 0, 0, 1, 1, 1], w
assert abs(w[2]["start"] - w[1]["end"]) < 1e-6 and abs(w[2]["end"] - w[3]["start"]) < 1e-6, w
assert all(w[i]["start"] >= w[i - 1]["end"] - 1e-6 for i in range(1, 6)), w
assert abs(ts[0] - w[0]["start"]) < 0.006, (ts, w[0])
PY
echo ok
