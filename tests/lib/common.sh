# Sourced first by the integration tests (after `set -u` and their own
# `: "${VAR:?}"` checks): T is the test's own temp dir ($EBB_TEST_TMP), made
# empty; fail() counts a failure and says what went wrong, the test ends with
# `exit $((fails > 0))` (or its own report when fails is not 0); jget JSON EXPR
# prints JSON's value at EXPR ('["a"][0]'), empty when it has none; SMI_HOOK
# is the path of smi_hook.sh, an EBB_STAGE_HOOK that logs what fakegpu-smi sees.
#
# A run holds the lock on $T.lock (lock.sh: two runs of one test in one
# build directory share T).
: "${EBB_TEST_TMP:?}"
T=$EBB_TEST_TMP
. "$(dirname "${BASH_SOURCE[0]}")/lock.sh"
rm -rf "$T" && mkdir -p "$T"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
jget() { python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(eval("d"+sys.argv[2]))' "$1" "$2" 2>/dev/null; }
SMI_HOOK="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/smi_hook.sh"
