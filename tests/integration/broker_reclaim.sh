#!/usr/bin/env bash
# THE BROKER (issue 35, docs/broker.md): three `ebb serve` on one fake 16 GiB
# device, registered in one broker directory:
#   A holds "un" (3 GiB, release after-stage: unloaded when asked);
#   B holds "keep" ("evictable": false), "sl2" and "sl" (release sleep), with
#     --reserve 1400 MiB (so sl2 may sleep but sl may not);
#   C holds "slow" and runs a long job on it (never taken).
# `ebb reclaim` for the free memory + 3472 MiB gets it (exit 0): A unloads,
# B puts sl2 to sleep, C is not asked; fakegpu-smi shows each giver's drop
# equal to what it logged (within 1 MiB) and to what `ebb reclaim` printed.
# Asked for 16 GiB it exits 1 naming what each keeps and why (evictable,
# --reserve, the running job); C's job still succeeds, untouched. A stopped
# peer is skipped within --broker-timeout; a SIGKILLed one's entry is removed.
set -u
: "${EBB_BUILD_DIR:?}" "${EBB:?}"
. "$(dirname "$0")/../lib/broker.sh"
export FAKEGPU_MEMORY_MIB=16384 FAKEGPU_CONTEXT_MIB=300
cleanup() { for p in "${PIDS[@]}"; do kill -CONT "$p"; kill -KILL "$p"; done 2>/dev/null; wait 2>/dev/null; }
trap cleanup EXIT
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {
  "un": {"stages": [{"stage": "synthetic", "name": "u", "cache": false,
                     "options": {"weights_mib": 3072, "touch": "sample"}}]},
  "keep": {"evictable": false, "stages": [{"stage": "synthetic", "name": "k", "cache": false,
                     "options": {"weights_mib": 1024, "touch": "sample"}}]},
  "sl2": {"release": "sleep", "stages": [{"stage": "synthetic", "name": "s2", "cache": false,
                     "options": {"weights_mib": 256, "touch": "sample"}}]},
  "sl": {"release": "sleep", "stages": [{"stage": "synthetic", "name": "s", "cache": false,
                     "options": {"weights_mib": 256, "touch": "sample"}}]},
  "slow": {"stages": [{"stage": "synthetic", "name": "w", "cache": false,
                     "options": {"weights_mib": 512, "run_ms": 9000, "touch": "sample"}}]}}}
JSON
echo "any input" > "$T/input.txt"

start() { broker_serve "$1" "$T/cfg.json" --input-dir "$T" "${@:2}"; } # NAME [flags...]
load() { local c; c=$(post "$1/v1/pipelines/$2/load"); [ "$c" = 200 ] || fail "load $2: $c $(cat "$T/post.out")"; }

start A
load "$URL_A" un
sleep 0.3 # A is the most idle
start B --reserve 1400
load "$URL_B" keep
load "$URL_B" sl2
load "$URL_B" sl
sleep 0.3
start C
load "$URL_C" slow
declare -A before
for n in A B C; do eval "p=\$PID_$n"; before[$n]=$(held_by "$p"); done
echo "--- held before: A ${before[A]} B ${before[B]} C ${before[C]} MiB; free $(free_mib) MiB"

# --- 1. enough can be had: A unloads, B puts sl2 to sleep, C is not asked
want=$(( $(free_mib) + 3372 + 100 ))
"$EBB" reclaim --device cuda:0 --bytes "${want}MiB" --broker-dir "$BD" --broker-timeout 60 --wait 60 \
  > "$T/r1.out" 2>&1
rc=$?
cat "$T/r1.out"
[ $rc = 0 ] || fail "reclaim of ${want} MiB exited $rc, expected 0"
[ "$(free_mib)" -ge "$want" ] || fail "after reclaim: $(free_mib) MiB free, wanted $want"
check_giver() { # NAME REASON-PATTERN
  local n=$1 p line logged printed now
  eval "p=\$PID_$n"
  wait_line() { for _ in $(seq 50); do grep -q "gave back" "$T/log$n" && return; sleep 0.1; done; }
  wait_line
  line=$(grep "^\[broker\] pid $p (ebb serve) gave back" "$T/log$n" | head -1)
  [ -n "$line" ] || { fail "server $n logged no [broker] line: $(cat "$T/log$n")"; return; }
  case $line in *"$2"*) ;; *) fail "server $n gave for another reason: $line (expected $2)" ;; esac
  logged=$(sed -n 's/.* gave back \([0-9]*\) MiB on cuda:0 in [0-9]* ms: .*/\1/p' <<< "$line")
  printed=$(grep "^\[broker\] pid $p " "$T/r1.out" | sed -n 's/.* gave back \([0-9]*\) MiB.*/\1/p')
  now=$(held_by "$p")
  local drop=$(( ${before[$n]} - now )) d
  d=$(( drop - logged )); d=${d#-}
  [ "$d" -le 1 ] || fail "server $n logged $logged MiB but fakegpu-smi shows a drop of $drop MiB (${before[$n]} -> $now)"
  [ "$printed" = "$logged" ] || fail "ebb reclaim printed '$printed' MiB for server $n, it logged $logged"
  echo "--- server $n: logged $logged MiB, fakegpu-smi drop $drop MiB"
}
check_giver A "pipeline un unloaded"
check_giver B "pipeline sl2 asleep"
grep -q "^\[broker\] pid $PID_C " "$T/r1.out" && fail "C was asked though A and B gave enough"
[ "$(held_by "$PID_C")" = "${before[C]}" ] || fail "C's usage changed: ${before[C]} -> $(held_by "$PID_C") MiB"

# --- 2. more than can be had: exit 1, each peer says what it keeps and why
# (C now runs a long job: it is never taken)
c=$(post "$URL_C/v1/jobs" -H 'Content-Type: application/json' -d "{\"pipeline\": \"slow\", \"input\": \"$T/input.txt\"}")
[ "$c" = 202 ] || fail "job on C: $c $(cat "$T/post.out")"
JOB=$(jget "$(cat "$T/post.out")" '["id"]')
for _ in $(seq 300); do # the job is running
  [ "$(jget "$(curl -s "$URL_C/v1/jobs/$JOB")" '["state"]')" = running ] && break; sleep 0.1
done
"$EBB" reclaim --device cuda:0 --bytes 16G --broker-dir "$BD" --broker-timeout 60 --wait 0.5 \
  > "$T/r2.out" 2>&1
rc=$?
cat "$T/r2.out"
[ $rc = 1 ] || fail "reclaim of 16 GiB exited $rc, expected 1"
expect() { grep -qF -- "$1" "$T/r2.out" || fail "reclaim of 16 GiB does not say: $1"; }
expect "pid $PID_B keeps pipeline keep (1324 MiB): \"evictable\": false in its config" # its need: weights + the context it created
expect "pid $PID_B keeps pipeline sl (256 MiB): --reserve 1400 MiB"
expect "pid $PID_B keeps pipeline sl2 (0 MiB): asleep"
expect "pid $PID_C keeps device"
expect "the device is running a job (pipeline slow)"
expect "MiB still missing"
for _ in $(seq 900); do
  st=$(jget "$(curl -s "$URL_C/v1/jobs/$JOB")" '["state"]')
  case $st in succeeded|failed|cancelled) break ;; esac; sleep 0.1
done
[ "$st" = succeeded ] || fail "C's job ended '$st' while peers asked C for memory"
grep -q "pipeline slow\] GPU memory free before unload\|s asleep" "$T/logC" &&
  fail "C gave its running pipeline away: $(cat "$T/logC")"

# --- 3. a stopped peer is skipped within --broker-timeout; a killed one's entry goes
kill -STOP "$PID_B"
t0=$(date +%s.%N)
"$EBB" reclaim --device cuda:0 --bytes 16G --broker-dir "$BD" --broker-timeout 1 --wait 0.5 \
  > "$T/r3.out" 2>&1
rc=$?
took=$(echo "$(date +%s.%N) - $t0" | bc)
cat "$T/r3.out"
[ $rc = 1 ] || fail "reclaim with a stopped peer exited $rc, expected 1"
grep -q "pid $PID_B skipped: .*did not answer within 1.0 s" "$T/r3.out" ||
  fail "the stopped peer $PID_B is not named as skipped"
[ "$(echo "$took < 4.5" | bc)" = 1 ] || fail "a stopped peer held the asker $took s (--broker-timeout 1, --wait 0.5)"
kill -KILL "$PID_B"
wait "$PID_B" 2>/dev/null
"$EBB" reclaim --device cuda:0 --bytes 16G --broker-dir "$BD" --broker-timeout 1 --wait 0.5 \
  > "$T/r4.out" 2>&1
[ -e "$BD/$PID_B.sock" ] && fail "the killed peer's entry $BD/$PID_B.sock is still there"
grep -q "pid $PID_B" "$T/r4.out" && fail "the killed peer was still asked: $(cat "$T/r4.out")"

# --- bad usage
"$EBB" reclaim --device cuda:x --bytes 1G --broker-dir "$BD" > /dev/null 2> "$T/e1"
[ $? = 2 ] && grep -q "cuda:x" "$T/e1" || fail "--device cuda:x: not exit 2 naming it: $(cat "$T/e1")"
"$EBB" reclaim --device cuda:0 --bytes lots --broker-dir "$BD" > /dev/null 2> "$T/e2"
[ $? = 2 ] && grep -q "lots" "$T/e2" || fail "--bytes lots: not exit 2 naming it: $(cat "$T/e2")"
"$EBB" serve --broker-group no-such-group-ebb > /dev/null 2> "$T/e3"
[ $? = 2 ] && grep -q "no-such-group-ebb" "$T/e3" || fail "--broker-group unknown: $(cat "$T/e3")"

for n in A C; do eval "p=\$PID_$n"; kill -TERM "$p"; wait "$p" || fail "server $n exited $? on SIGTERM"; done
PIDS=()
# (claims stay: their holder, this shell, is alive; docs/broker.md "Claims")
[ -z "$(ls "$BD" | grep -v '^claim')" ] || fail "entries left after the servers stopped: $(ls "$BD")"
[ $fails -eq 0 ] && echo "broker_reclaim: ok"
exit $((fails > 0))
