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
# foreign_env: what a program not built with the sanitizers (Python, a client
# built with nvcc) needs in its environment to load a fake that was (`make
# asan`): the sanitizer runtimes preloaded first, and no leak report of its
# own. Empty for a plain build. Use: env "${FOREIGN_ENV[@]}" PROGRAM ...
FOREIGN_ENV=()
_fg_lib=$(dirname "$FAKEGPU_SMI")/libcuda.so.1
_fg_san=$(ldd "$_fg_lib" 2>/dev/null | awk '/lib(asan|ubsan)\.so/ { printf "%s%s", sep, $3; sep = ":" }')
if [ -n "$_fg_san" ]; then
  FOREIGN_ENV=(LD_PRELOAD="$_fg_san" ASAN_OPTIONS="detect_leaks=0:${ASAN_OPTIONS:-}")
fi
