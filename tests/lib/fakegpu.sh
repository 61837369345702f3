# Sourced by the integration tests that use the fake GPU (after `set -u` and
# their `: "${VAR:?}"` checks): common.sh (T, fail), a fresh fake device
# (FAKEGPU_STATE removed), and
#   apps         fakegpu-smi's per-process lines (pid, MiB)
#   held_by PID  the MiB fakegpu-smi lists for PID (0 when not listed)
: "${FAKEGPU_SMI:?}" "${FAKEGPU_STATE:?}"
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
rm -f "$FAKEGPU_STATE"
apps() { "$FAKEGPU_SMI" --query-compute-apps=pid,used_memory --format=csv,noheader,nounits; }
held_by() { apps | awk -F', *' -v p="$1" '$1 == p {s += $2} END {print s + 0}'; }
