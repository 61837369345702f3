# Sourced first by the integration tests (after `set -u` and their own
# `: "${VAR:?}"` checks): T is the test's own temp dir ($EBB_TEST_TMP), made
# empty; fail() counts a failure and says what went wrong, the test ends with
# `exit $((fails > 0))` (or its own report when fails is not 0); jget JSON EXPR
# prints JSON's value at EXPR ('["a"][0]'), empty when it has none; SMI_HOOK
# is the path of smi_hook.sh, an EBB_STAGE_HOOK that logs what fakegpu-smi sees.
#
# T (and FAKEGPU_STATE) are named after the test in its build directory, so
# two runs of one test in one build directory (`make test` while a `ctest -R`
# of the same test runs there) would share them: the second one's `rm -rf
# "$T"` below deleted the first's files under its running server (server_upload
# failed once so: its session item's directory vanished mid-item). A run holds
# an exclusive flock on $T.lock for its whole life (its children inherit it:
# a process a run leaves behind may still use $T, so it holds the lock too),
# and a second run waits for it (up to EBB_TEST_LOCK_WAIT_S, 900 s) first.
: "${EBB_TEST_TMP:?}"
T=$EBB_TEST_TMP
mkdir -p "$(dirname "$T")"
exec {EBB_TEST_LOCK_FD}>"$T.lock"
if ! flock -n "$EBB_TEST_LOCK_FD"; then
  echo "note: another run of this test uses $T; waiting for it to end" >&2
  flock -w "${EBB_TEST_LOCK_WAIT_S:-900}" "$EBB_TEST_LOCK_FD" ||
    { echo "FAIL: another run of this test held $T.lock for ${EBB_TEST_LOCK_WAIT_S:-900} s" >&2; exit 1; }
fi
rm -rf "$T" && mkdir -p "$T"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
jget() { python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(eval("d"+sys.argv[2]))' "$1" "$2" 2>/dev/null; }
SMI_HOOK="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/smi_hook.sh"
