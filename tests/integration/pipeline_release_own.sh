#!/usr/bin/env bash
# Issue 17: every release line is that stage's own bytes. Three synthetic
# stages (s1: weights 512 + cache 100 MiB, s2: 1024 + 200, s3: 256 + 300)
# kept loaded until the end: each "[sN] released N MiB of GPU memory" is its
# weights + cache plus at most its 64 MiB of cached activations (s1 612-676,
# s2 1224-1288, s3 556-620), and equals (+-2 MiB) the drop fakegpu-smi
# measures from outside around that release (the EBB_STAGE_HOOK events
# release-start / release-end). Under `ebb run --release after-job`, under
# idle:S eviction in `ebb serve` (the server's timer), and under an unload
# (`ebb serve`, POST /v1/pipelines/NAME/unload) of a loaded pipeline.
set -u
. "$(dirname "$0")/../lib/server.sh"
export FAKEGPU_CONTEXT_MIB=300 FAKEGPU_MEMORY_MIB=16384

stages='[
  {"stage": "synthetic", "name": "s1", "cache": false,
   "options": {"weights_mib": 512, "cache_mib": 100, "touch": "sample"}},
  {"stage": "synthetic", "name": "s2", "cache": false,
   "options": {"weights_mib": 1024, "cache_mib": 200, "touch": "sample"}},
  {"stage": "synthetic", "name": "s3", "cache": false,
   "options": {"weights_mib": 256, "cache_mib": 300, "touch": "sample"}}]'
cat > "$T/cfg.json" <<JSON
{"pipelines": {"three": {"stages": $stages},
               "idle3": {"stages": $stages, "release": "idle:1"}}}
JSON
echo "any input" > "$T/input.txt"
export HOOK_LOG="$T/hook.log" HOOK_EVENTS='release-*' EBB_STAGE_HOOK="sh $SMI_HOOK"
used_at() { awk -v e="$1" -v s="$2" '$1 == e && $2 == s {print $4}' "$HOOK_LOG" | tail -1; }

# check WHAT LOG: each stage's line in range and equal to fakegpu-smi's drop
check() {
  local what=$1 log=$2 s lo hi
  for spec in "s1 612 676" "s2 1224 1288" "s3 556 620"; do
    set -- $spec
    s=$1 lo=$2 hi=$3
    n=$(grep -E "^\[$s\] released [0-9]+ MiB of GPU memory$" "$log" | tail -1 | awk '{print $3}')
    [ -n "$n" ] || { fail "$what: no release line for $s: $(grep "^\[$s\]" "$log")"; continue; }
    [ "$n" -ge "$lo" ] && [ "$n" -le "$hi" ] ||
      fail "$what: $s released $n MiB, want its own weights + cache: $lo-$hi MiB"
    b=$(used_at release-start "$s") a=$(used_at release-end "$s")
    [ -n "$b" ] && [ -n "$a" ] || { fail "$what: no hook lines around $s's release"; continue; }
    drop=$((b - a)) d=$((n - (b - a)))
    echo "$what: $s says $n MiB; fakegpu-smi $b -> $a MiB (drop $drop)"
    [ "${d#-}" -le 2 ] || fail "$what: $s says $n MiB, fakegpu-smi measured a drop of $drop MiB"
  done
}

# --- ebb run --release after-job ----------------------------------------------------
: > "$HOOK_LOG"
"$EBB" run --pipeline three --config "$T/cfg.json" --device cuda --no-cache -o "$T/out" \
  --release after-job "$T/input.txt" > "$T/run.out" 2> "$T/run.err"
rc=$?
cat "$T/run.out" "$HOOK_LOG"
[ "$rc" = 0 ] || fail "after-job: ebb run exited $rc: $(cat "$T/run.err")"
check after-job "$T/run.out"

# --- ebb serve: idle:1 eviction, then an unload -------------------------------------
: > "$HOOK_LOG"
serve "$T/serve.log" --config "$T/cfg.json" --data-dir "$T/data" --input-dir "$T"
post() { curl -s -X POST -H 'Content-Type: application/json' "$URL$1" ${2:+-d "$2"}; }
wait_job() { # POST_ANSWER WHAT
  local id
  id=$(jget "$1" '["id"]')
  [ -n "$id" ] || { fail "$2: no job id in: $1"; return; }
  wait_done "$id"
  [ "$STATE" = succeeded ] || fail "$2: job $id ended $STATE"
}

wait_job "$(post /v1/jobs "{\"pipeline\": \"idle3\", \"input\": \"$T/input.txt\"}")" idle
# the server's timer evicts them all (newest first: s3, s2, s1)
for _ in $(seq 300); do
  [ "$(grep -cE '^\[s[123]\] released' "$T/serve.log")" -ge 3 ] &&
    [ "$(grep -c '^release-end ' "$HOOK_LOG")" -ge 3 ] && break
  sleep 0.1
done
cp "$HOOK_LOG" "$T/hook.idle"
check idle:1 "$T/serve.log"

: > "$HOOK_LOG"
: > "$T/serve.log.mark"
lines=$(wc -l < "$T/serve.log")
post /v1/pipelines/three/load > "$T/load.json"
wait_job "$(post /v1/jobs "{\"pipeline\": \"three\", \"input\": \"$T/input.txt\"}")" loaded
post /v1/pipelines/three/unload > "$T/unload.json"
tail -n +$((lines + 1)) "$T/serve.log" > "$T/unload.log"
cat "$T/unload.log" "$HOOK_LOG"
check unload "$T/unload.log"

[ "$fails" = 0 ] && echo "PASS" || echo "$fails failure(s)"
exit $((fails > 0))
