#!/usr/bin/env bash
# CLAIMS (issue 35, docs/broker.md "Claims"): two processes asking at once do
# not both take the same freed bytes. One fake 16 GiB device: a foreign
# filler leaves ~1 GiB free; servers A and B each hold an idle 3 GiB
# pipeline. X asks for 3000 MiB on behalf of a process that has not
# allocated yet; then Y asks for 3000 MiB too: Y must see X's claim and get
# its own bytes from B (without claims Y would find 4.3 GiB free, ask nobody,
# and both would allocate into the same bytes). A claim ends when its holder
# dies or its allocation lands (the holder's driver usage grew by it). Then
# X and Y ask at the same moment: both succeed and the driver shows the
# bytes of both free.
set -u
. "$(dirname "$0")/../lib/broker_claims.sh"
fill=$(( $(free_mib) - 300 - 1024 ))
"$HOLD" --alloc "$fill" --wait < /dev/null > /dev/null &
PIDS+=($!)
for _ in $(seq 50); do [ "$(free_mib)" -le 1100 ] && break; sleep 0.1; done
echo "--- free $(free_mib) MiB; A holds $(held_by "$PID_A"), B $(held_by "$PID_B") MiB"

# --- 1. one after the other: Y sees X's claim and asks B for its own bytes
holder; HX=$HP
reclaim --bytes 3000MiB --for "$HX" --hold 60 > "$T/x.out" 2>&1
rc=$?; cat "$T/x.out"
[ $rc = 0 ] || fail "X's reclaim exited $rc"
grep -q "^\[broker\] pid $PID_A (ebb serve) gave back" "$T/x.out" || fail "X was not given A's memory"
grep -q "pid $PID_B" "$T/x.out" && fail "X asked B though A gave enough"
reclaim_y " (X's claim in the way and B not asked?)"
grep -q "^\[broker\] pid $PID_B (ebb serve) gave back" "$T/y.out" ||
  fail "Y did not ask B: it counted the bytes A freed for X"
[ "$(free_mib)" -ge 6000 ] || fail "after X and Y: $(free_mib) MiB free, 6000 claimed"

# --- 2. a claim ends when its holder dies, or when its allocation lands
kill -KILL "$HX"; wait "$HX" 2>/dev/null
reclaim --bytes 1MiB > "$T/z.out" 2>&1
grep -q "pid $HX" "$T/z.out" && fail "the dead holder's claim still counts: $(cat "$T/z.out")"
grep -q "pid $HY 3000 MiB" "$T/z.out" || fail "Y's live claim is not counted: $(cat "$T/z.out")"
kill -KILL "$HY"; wait "$HY" 2>/dev/null
coproc H { exec "$HOLD"; }
PIDS+=($H_PID)
say() { echo "$1" >&"${H[1]}"; read -r -t 10 reply <&"${H[0]}"; [[ $reply == ok* ]] || fail "fakegpu-hold answered '$reply' to '$1'"; }
say init; say ctx
reclaim --bytes 2000MiB --for "$H_PID" > /dev/null 2>&1 || fail "H's reclaim of 2000 MiB failed"
reclaim --bytes 1MiB > "$T/z2.out" 2>&1
grep -q "pid $H_PID 2000 MiB" "$T/z2.out" || fail "H's claim is not seen before it allocates: $(cat "$T/z2.out")"
say "alloc 2000"
reclaim --bytes 1MiB > "$T/z3.out" 2>&1
grep -q "pid $H_PID" "$T/z3.out" && fail "H's claim still counts after its allocation landed: $(cat "$T/z3.out")"
grep -lq "\"holder\":$H_PID," "$BD"/claim.* 2>/dev/null && fail "H's claim file is left after it landed: $(ls "$BD")"
say release

# --- 3. at the same moment: both get their bytes
load "$URL_A"
load "$URL_B"
for _ in $(seq 50); do [ "$(free_mib)" -le 1100 ] && break; sleep 0.1; done
holder; HX=$HP
holder; HY=$HP
reclaim --bytes 3000MiB --for "$HX" --hold 60 > "$T/cx.out" 2>&1 &
X=$!
reclaim --bytes 3000MiB --for "$HY" --hold 60 > "$T/cy.out" 2>&1 &
Y=$!
wait $X; rx=$?
wait $Y; ry=$?
cat "$T/cx.out" "$T/cy.out"
[ $rx = 0 ] && [ $ry = 0 ] || fail "asking at once: X exited $rx, Y $ry"
cat "$T/cx.out" "$T/cy.out" | grep -Eq "claimed by .*(pid $HX|pid $HY) 3000 MiB" ||
  fail "neither of two simultaneous askers saw the other's claim"
[ "$(free_mib)" -ge 6000 ] || fail "after X and Y at once: $(free_mib) MiB free, 6000 claimed"
echo "--- at once: $(free_mib) MiB free for 2 x 3000 MiB claimed"

[ $fails -eq 0 ] && echo "broker_claims: ok"
exit $((fails > 0))
