# The EBB_STAGE_HOOK command of the tests that measure ebb from outside
# (EBB_STAGE_HOOK="sh $SMI_HOOK", SMI_HOOK set by fakegpu.sh): appends
# "EVENT STAGE RELEASED_BYTES USED_MIB" to $HOOK_LOG, USED_MIB being what
# fakegpu-smi, a process apart from ebb, lists for ebb's pid (0 when it is
# not listed). HOOK_EVENTS, case patterns separated by spaces ('release-*',
# 'before-release after-stage'), keeps only those events. POSIX sh: ebb runs
# it as a command of its own.
set -f # the patterns are not file names
keep=
for p in ${HOOK_EVENTS:-*}; do
  case $EBB_HOOK_EVENT in $p) keep=1 ;; esac
done
[ -n "$keep" ] || exit 0
used=$("$FAKEGPU_SMI" --query-compute-apps=pid,used_memory --format=csv,noheader,nounits |
       awk -F', *' -v p="$EBB_HOOK_PID" '$1 == p {s += $2} END {print s + 0}')
echo "$EBB_HOOK_EVENT $EBB_HOOK_STAGE $EBB_HOOK_RELEASED_BYTES $used" >> "$HOOK_LOG"
