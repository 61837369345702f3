#!/usr/bin/env bash
# `ebb run` end to end on the fake GPU: release policies measured from the
# hook (after-job keeps stages loaded until the job ends; idle:S in a
# one-job `ebb run` releases at job end), the memory timeline (SVG and JSON),
# the stage result cache (hit, corrupt entry recomputed, --no-cache), a
# stage timeout, and the example plugin through a config's plugin_dirs.
set -u
: "${EBB:?}" "${EBB_EXAMPLE_PLUGIN_DIR:?}"
. "$(dirname "$0")/../lib/fakegpu.sh"
export FAKEGPU_CONTEXT_MIB=300
head -c 300000 /dev/urandom > "$T/input.bin"
export HOOK_LOG="$T/hook.log" EBB_STAGE_HOOK="sh $SMI_HOOK"
used_at() { awk -v e="$1" -v s="$2" '$1 == e && $2 == s {print $4}' "$HOOK_LOG"; }

cat > "$T/cfg.json" <<JSON
{"plugin_dirs": ["$EBB_EXAMPLE_PLUGIN_DIR"],
 "pipelines": {
  "two": {"stages": [
    {"stage": "synthetic", "name": "a", "cache": false, "options": {"weights_mib": 128, "cache_mib": 32}},
    {"stage": "synthetic", "name": "b", "cache": false, "options": {"weights_mib": 256, "cache_mib": 32}}]},
  "cached": {"stages": [
    {"stage": "synthetic", "name": "s", "options": {"weights_mib": 16}},
    {"stage": "checksum", "options": {"chunk_kib": 64}}]},
  "slow": {"stages": [
    {"stage": "synthetic", "name": "sleepy", "cache": false, "timeout_s": 0.5,
     "options": {"weights_mib": 16, "run_ms": 30000}}]}}}
JSON
run() { : > "$HOOK_LOG"; "$EBB" run --config "$T/cfg.json" --device cuda -o "$T/out" "$@" \
          > "$T/stdout" 2> "$T/stderr"; rc=$?; }

# after-job: a stays loaded while b runs; both go at the job's end
run --pipeline two --no-cache --release after-job "$T/input.bin"
cat "$T/stdout" "$HOOK_LOG"
[ "$rc" = 0 ] || fail "after-job: exit $rc: $(cat "$T/stderr")"
a_kept=$(used_at after-stage a)
[ "${a_kept:-0}" -ge $((300 + 128 + 32)) ] || fail "after-job: after a the process holds ${a_kept:-?} MiB"
b_kept=$(used_at after-stage b)
[ "${b_kept:-0}" -ge $((300 + 128 + 32 + 256 + 32)) ] || fail "after-job: after b: ${b_kept:-?} MiB"
[ "$(used_at after-job two)" = 0 ] || fail "after-job: the job's end left $(used_at after-job two) MiB"
ra=$(grep -n '^\[a\] released' "$T/stdout" | cut -d: -f1)
db=$(grep -n '^\[b\] done' "$T/stdout" | cut -d: -f1)
[ -n "$ra" ] && [ -n "$db" ] && [ "$ra" -gt "$db" ] || fail "after-job: a released before b ran"

# idle:30 in ebb run (one job): released at the job's end
run --pipeline two --no-cache --release idle:30 --timeline "$T/t.svg" "$T/input.bin"
[ "$rc" = 0 ] || fail "idle: exit $rc: $(cat "$T/stderr")"
[ "$(used_at after-stage b)" -ge $((300 + 128 + 256)) ] || fail "idle: b released early"
[ "$(used_at after-job two)" = 0 ] || fail "idle: the job's end left $(used_at after-job two) MiB"
grep -q '^\[a\] released' "$T/stdout" || fail "idle: no release line for a"
grep -q '^<svg' "$T/t.svg" && grep -q '</svg>' "$T/t.svg" || fail "timeline: not an SVG"
run --pipeline two --no-cache --timeline "$T/t.json" "$T/input.bin"
python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
kinds = {e["kind"] for e in d["events"]}
assert {"alloc", "free", "release"} <= kinds, kinds
assert {"a", "b"} <= {o["name"] for o in d["owners"]}' "$T/t.json" || fail "timeline: JSON"

# the result cache
C="$T/cache"
run --pipeline cached --cache-dir "$C" "$T/input.bin"
[ "$rc" = 0 ] || fail "cache 1: exit $rc: $(cat "$T/stderr")"
sum1=$(grep -o 'fnv1a64 [0-9a-f]*' "$T/stdout")
[ -n "$sum1" ] || fail "cache 1: the checksum plugin did not run"
[ "$(ls "$C"/*.ebbc | wc -l)" = 2 ] || fail "cache 1: want 2 entries, have: $(ls "$C")"
run --pipeline cached --cache-dir "$C" "$T/input.bin"
[ "$rc" = 0 ] || fail "cache 2: exit $rc"
grep -q '^\[s\] cached$' "$T/stdout" && grep -q '^\[checksum\] cached$' "$T/stdout" ||
  fail "cache 2: not served from the cache: $(cat "$T/stdout")"
grep -qE '^\[(s|checksum)\] (released|done in)' "$T/stdout" && fail "cache 2: a cached stage ran"
[ -z "$(grep -E '^(before-release|after-stage)' "$HOOK_LOG")" ] || fail "cache 2: a cached stage was released"
grep -q '"fnv1a64"' "$T/out/result.json" || fail "cache 2: the cached item is missing from result.json"
for f in "$C"/*.ebbc; do printf 'garbage' | dd of="$f" bs=1 seek=40 conv=notrunc 2>/dev/null; done
run --pipeline cached --cache-dir "$C" "$T/input.bin"
[ "$rc" = 0 ] || fail "cache 3: exit $rc: $(cat "$T/stderr")"
grep -q 'checksum mismatch; recomputing' "$T/stdout" || fail "cache 3: corruption not reported"
[ "$(grep -o 'fnv1a64 [0-9a-f]*' "$T/stdout")" = "$sum1" ] || fail "cache 3: recomputed checksum differs"
run --pipeline cached --cache-dir "$C" --no-cache "$T/input.bin"
grep -qE '^\[.*\] cached$' "$T/stdout" && fail "--no-cache still used the cache"
echo "x" >> "$T/input.bin"
run --pipeline cached --cache-dir "$C" "$T/input.bin"
grep -q '^\[checksum\] cached' "$T/stdout" && fail "cache: other input content, same entry"
XDG_CACHE_HOME="$T/xdg" run --pipeline cached --cache "$T/input.bin"
ls "$T/xdg/ebb/"*.ebbc > /dev/null 2>&1 || fail "cache: default dir \$XDG_CACHE_HOME/ebb unused"
# without --cache (and no "cache": true in the config) nothing is cached:
# running twice runs every stage twice
for i in 1 2; do
  XDG_CACHE_HOME="$T/xdg2" run --pipeline cached "$T/input.bin"
  grep -qE '^\[.*\] cached$' "$T/stdout" && fail "cache off by default: run $i was served from the cache"
done
[ -e "$T/xdg2/ebb" ] && ls "$T/xdg2/ebb/"*.ebbc > /dev/null 2>&1 && fail "cache off by default: entries were written"

# a stage timeout
start=$(date +%s)
run --pipeline slow --no-cache "$T/input.bin"
took=$(( $(date +%s) - start ))
[ "$rc" = 1 ] || fail "timeout: exit $rc"
grep -q "stage 'sleepy' timed out: it ran past its timeout_s of 0.5 s" "$T/stderr" ||
  fail "timeout: message: $(cat "$T/stderr")"
[ "$took" -lt 10 ] || fail "timeout: took $took s"
[ "$(used_at after-job slow)" = 0 ] || fail "timeout: the job left memory"

apps=$("$FAKEGPU_SMI" --query-compute-apps=pid,used_memory --format=csv,noheader,nounits)
[ -z "$apps" ] || fail "after exit fakegpu-smi lists: $apps"
[ "$fails" = 0 ] && echo "PASS" || echo "$fails failure(s)"
exit $((fails > 0))
