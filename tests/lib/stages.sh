# Sourced first by the stage tests that run under `set -euo pipefail` and
# stop at their first failure: TMP ($EBB_TEST_TMP) made empty, no Whisper
# server configured from outside (EBB_WHISPER_URL, EBB_WHISPER_API_KEY unset),
# fail() says what went wrong and exits 1, and $EBB is checked.
: "${EBB:?}" "${EBB_TEST_TMP:?}"
TMP="$EBB_TEST_TMP"
rm -rf "$TMP" && mkdir -p "$TMP"
unset EBB_WHISPER_URL EBB_WHISPER_API_KEY
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -x "$EBB" ] || fail "no ebb binary at $EBB"

# flite_devset SRC: the lyrics dev set's flite songs (bench/lyrics_devset.py
# dev --songs 2 --sources flite, under SRC) made in $TMP/dev, their names in
# $TMP/names.txt; needs pocketsphinx-en-us and flite; leaves the shell in $TMP.
flite_devset() {
  [ -r /usr/share/pocketsphinx/model/en-us/en-us/mdef ] ||
    fail "pocketsphinx-en-us is not installed (scripts/install-deps.sh installs it)"
  command -v flite >/dev/null || fail "flite is not installed (scripts/install-deps.sh installs it)"
  cd "$TMP"
  /usr/bin/python3 "$1/bench/lyrics_devset.py" dev --songs 2 --sources flite >names.txt 2>gen.log ||
    fail "the dev set was not generated: $(tail -3 gen.log)"
}
