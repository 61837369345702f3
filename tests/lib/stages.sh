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
