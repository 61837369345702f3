#!/usr/bin/env bash
# The fake GPU's acceptance test (issue #2): process A allocates 1 GiB on the
# fake; fakegpu-smi, run as a separate process, reports A's usage including
# its context (1024 + 300 MiB); A releases everything and its context;
# fakegpu-smi then reports nothing for A.
set -euo pipefail
: "${FAKEGPU_SMI:?}" "${FAKEGPU_STATE:?}" "${EBB_TEST_TMP:?}"
. "$(dirname "$0")/../lib/lock.sh"
mkdir -p "$EBB_TEST_TMP"
rm -f "$FAKEGPU_STATE"
. "$(dirname "$0")/../lib/hold.sh"
fail() { echo "FAIL: $*" >&2; exit 1; }

start_hold

say init
say ctx
say "alloc 1024"
say pid
pid=${reply#ok }

apps=$("$FAKEGPU_SMI" --query-compute-apps=pid,used_memory --format=csv,noheader,nounits)
echo "while A holds 1 GiB: $apps"
grep -qx "$pid, 1324" <<<"$apps" || fail "expected '$pid, 1324' in: $apps"
gpu=$("$FAKEGPU_SMI" --query-gpu=memory.used,memory.free,memory.total --format=csv,noheader,nounits)
echo "gpu: $gpu"
[[ $gpu == "1324, 80596, 81920" ]] || fail "gpu line '$gpu'"

say release
apps=$("$FAKEGPU_SMI" --query-compute-apps=pid,used_memory --format=csv,noheader,nounits)
echo "after A released: '$apps'"
if grep -q "^$pid," <<<"$apps"; then fail "A ($pid) still listed: $apps"; fi
gpu=$("$FAKEGPU_SMI" --query-gpu=memory.used,memory.free,memory.total --format=csv,noheader,nounits)
[[ $gpu == "0, 81920, 81920" ]] || fail "gpu line after release '$gpu'"

say exit
wait "$apid" || true
echo "ok"
