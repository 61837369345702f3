#!/usr/bin/env bash
# `make demo` runs scripts/demo.sh: it must work as a newcomer runs it (no
# EBB_LIBCUDA: the real driver if any, else the CPU; then the fake GPU step),
# produce the songtrace outputs, and show the release lines confirmed by
# fakegpu-smi. With no Whisper server it times the demo's lyrics offline
# (align's acoustic method): lyrics.lrc and lyrics.words.lrc are written,
# the first lines are printed word by word, and at least 90 % of the word
# onsets in songtrace.json are within 0.3 s of the truth.
set -u
: "${EBB_SOURCE_DIR:?}" "${EBB_BUILD_DIR:?}" "${EBB_TEST_TMP:?}"
. "$(dirname "$0")/../lib/lock.sh"
rm -rf "$EBB_TEST_TMP" && mkdir -p "$EBB_TEST_TMP"
unset EBB_LIBCUDA EBB_LIBNVML FAKEGPU_STATE EBB_WHISPER_URL EBB_STAGE_HOOK
export DEMO_OUT=$EBB_TEST_TMP/out
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
"$EBB_SOURCE_DIR/scripts/demo.sh" "$EBB_BUILD_DIR" > "$EBB_TEST_TMP/log" 2>&1
rc=$?
cat "$EBB_TEST_TMP/log"
[ "$rc" = 0 ] || fail "demo.sh exited $rc"
for f in songtrace.json melody.mid pitch.csv timeline.svg; do
  [ -s "$DEMO_OUT/songtrace/$f" ] || fail "demo output $f missing"
done
grep -q "pipeline songtrace done" "$EBB_TEST_TMP/log" || fail "songtrace did not finish"
for f in lyrics.lrc lyrics.words.lrc; do
  [ -s "$DEMO_OUT/songtrace/$f" ] || fail "demo output $f missing (no Whisper server is needed for it)"
done
grep -qE '^    [0-9]+\.[0-9]{2} [a-z]+  [0-9]+\.[0-9]{2} [a-z]+' "$EBB_TEST_TMP/log" ||
  fail "demo printed no lyric line with word times"
python3 - "$DEMO_OUT/songtrace/songtrace.json" "$EBB_BUILD_DIR/samples/demo.truth.json" <<'PY' ||
import json, sys
ly = json.load(open(sys.argv[1]))["lyrics"]
truth = json.load(open(sys.argv[2]))["words"]
words = ly["words"]
assert ly["source"] == "acoustic", ly["source"]
assert [w["word"] for w in words] == [w["word"] for w in truth], "the words differ from the truth's"
ok = sum(abs(a["start"] - b["start"]) <= 0.3 for a, b in zip(words, truth))
print(f"demo_script: {ok} of {len(truth)} word onsets within 0.3 s of the truth")
assert ok >= 0.9 * len(truth), f"only {ok} of {len(truth)} word onsets within 0.3 s (need 90 %)"
assert all(w["source"] == "acoustic" and 0 <= w["confidence"] <= 1 for w in words), words
PY
  fail "the demo's word onsets are off (figures above)"
if grep -q "the next steps run on the CPU device" "$EBB_TEST_TMP/log"; then
  # no GPU here: the fake GPU step shows the releases, confirmed from outside
  grep -qE '^\[separate\] released [0-9]+ MiB of GPU memory$' "$EBB_TEST_TMP/log" || fail "no release line for separate"
  grep -qE '^\[pitch\] released [0-9]+ MiB of GPU memory$' "$EBB_TEST_TMP/log" || fail "no release line for pitch"
  grep -qE 'fakegpu-smi after-stage +separate +ebb holds +0 MiB' "$EBB_TEST_TMP/log" || fail "fakegpu-smi does not confirm separate's release"
fi
[ "$fails" = 0 ] && echo "demo_script: ok" || exit 1
