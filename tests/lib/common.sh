# Sourced first by the integration tests (after `set -u` and their own
# `: "${VAR:?}"` checks): T is the test's own temp dir ($EBB_TEST_TMP), made
# empty; fail() counts a failure and says what went wrong, the test ends with
# `exit $((fails > 0))` (or its own report when fails is not 0).
: "${EBB_TEST_TMP:?}"
T=$EBB_TEST_TMP
rm -rf "$T" && mkdir -p "$T"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
