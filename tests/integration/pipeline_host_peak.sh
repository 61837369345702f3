#!/usr/bin/env bash
# Issue 17: host memory counted too. On `--device cpu` songtrace's separate
# and pitch take their working buffers through their owner (host_alloc), so
# `ebb run` reports a non-zero host peak per stage beside the device peak
# ("done in ..., peak N MiB, host peak M MiB"), within 10 % of the process's
# RSS growth during the stage, measured from outside: the EBB_STAGE_HOOK
# reads /proc/PID/status (VmRSS when the stage before ends, VmHWM when the
# stage ends) and resets the high-water mark between stages (clear_refs 5).
set -u
: "${EBB:?}" "${EBB_BUILD_DIR:?}"
. "$(dirname "$0")/../lib/common.sh"
unset EBB_WHISPER_URL
WAV=$EBB_BUILD_DIR/samples/demo.wav
[ -f "$WAV" ] || { echo "FAIL: $WAV missing (the build makes it)"; exit 1; }
cat > "$T/hook.sh" <<'SH'
f=/proc/$EBB_HOOK_PID/status
echo "$EBB_HOOK_EVENT $EBB_HOOK_STAGE $(awk '/^VmRSS/ {print $2}' $f) $(awk '/^VmHWM/ {print $2}' $f)" >> "$HOOK_LOG"
[ "$EBB_HOOK_EVENT" = after-stage ] && echo 5 > /proc/$EBB_HOOK_PID/clear_refs
exit 0
SH
export HOOK_LOG="$T/hook.log" EBB_STAGE_HOOK="sh $T/hook.sh"
"$EBB" run --pipeline songtrace --device cpu --no-cache --log-format json -o "$T/out" "$WAV" \
  > "$T/run.log" 2> "$T/run.err" || fail "ebb run exited $?: $(cat "$T/run.err")"
cat "$HOOK_LOG"
# under AddressSanitizer the process's RSS is ASan's too (shadow memory, the
# quarantine of freed blocks): only the non-zero peaks are checked there
ASAN=0
ldd "$EBB" 2>/dev/null | grep -q libasan && ASAN=1 &&
  echo "NOTE: $EBB is built with AddressSanitizer: RSS comparison not checked"
ASAN=$ASAN python3 - "$T/run.log" "$HOOK_LOG" <<'PY' || fail "host peaks"
import json, os, sys
asan = os.environ.get("ASAN") == "1"
done = {}
for l in open(sys.argv[1]):
    try: e = json.loads(l)
    except ValueError: continue
    if e.get("event") == "stage_done": done[e["stage"]] = e
order, hook = [], {}
for l in open(sys.argv[2]):
    ev, st, rss, hwm = l.split()
    hook[(ev, st)] = (int(rss) * 1024, int(hwm) * 1024)
    if ev == "after-stage": order.append(st)
ok = True
for s in ("separate", "pitch"):
    prev = order[order.index(s) - 1]
    start = hook[("after-stage", prev)][0]         # RSS as the stage began
    peak = hook[("before-release", s)][1]          # its high-water mark
    grew, said = peak - start, done[s]["host_peak_bytes"]
    off = (said - grew) / grew if grew > 0 else 1
    print("%s: host peak %.1f MiB, RSS grew %.1f MiB during it (%+.1f %%)" % (s, said / 2**20, grew / 2**20, off * 100))
    if said <= 0 or (abs(off) > 0.10 and not asan):
        print("FAIL: %s's host peak is not within 10 %% of the RSS growth" % s); ok = False
sys.exit(0 if ok else 1)
PY
grep -q '"msg": *"done in [0-9.]* s, peak [0-9]* MiB, host peak [1-9][0-9]* MiB"' "$T/run.log" ||
  fail "no 'done in ..., peak N MiB, host peak M MiB' line with a non-zero host peak"

[ "$fails" = 0 ] && echo "PASS" || echo "$fails failure(s)"
exit $((fails > 0))
