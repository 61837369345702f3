#!/usr/bin/env bash
# CLAIMS larger than the free memory (docs/broker.md "Claims", step 2): an
# earlier claim that the driver's free memory no longer covers is asked for
# too. One fake 16 GiB device; servers A and B each hold an idle 3 GiB
# pipeline. X claims 3000 MiB while plenty is free (nobody is asked); then a
# foreign filler leaves ~1 GiB free, so X's claim is ~2 GiB more than is
# free. Y asks for 3000 MiB: it must ask for 3000 + 3000 - 1024 MiB, i.e.
# both A and B (until 2026-12-07 the shortfall under the claim was dropped:
# Y asked for 3000 MiB, A alone gave 3372, and Y failed with ~1600 MiB
# missing; broker_claims hit it when X and Y asked at the same moment).
set -u
. "$(dirname "$0")/../lib/broker_claims.sh"

holder; HX=$HP
reclaim --bytes 3000MiB --for "$HX" --hold 60 > "$T/x.out" 2>&1 || fail "X's reclaim exited $?: $(cat "$T/x.out")"
grep -q "^\[broker\] pid .* gave back" "$T/x.out" && fail "X asked a peer though $(free_mib) MiB were free: $(cat "$T/x.out")"
leave_free 1024
echo "--- free $(free_mib) MiB, X's 3000 MiB claimed; A holds $(held_by "$PID_A"), B $(held_by "$PID_B") MiB"

reclaim_y ": X's claim is more than the free memory and Y did not ask for the difference"
for p in "$PID_A" "$PID_B"; do
  grep -q "^\[broker\] pid $p (ebb serve) gave back [1-9]" "$T/y.out" || fail "Y was not given pid $p's memory"
done
[ "$(free_mib)" -ge 6000 ] || fail "after Y: $(free_mib) MiB free for 2 x 3000 MiB claimed"
echo "--- after Y: $(free_mib) MiB free for 2 x 3000 MiB claimed"

[ $fails -eq 0 ] && echo "broker_claims_short: ok"
exit $((fails > 0))
