#!/usr/bin/env bash
# Numba through ebb on the fake GPU (NUMBA_CUDA_MEMORY_MANAGER=ebb.numba,
# Debian's python3-numba under /usr/bin/python3):
#   1. tests/python/numba_check.py: owners of 1, 2 and 3 GiB, each o.release()
#      against fakegpu-smi, a forgotten array reported with its line, the
#      process at 0 bytes with the context released;
#   2. examples/workers/numba.json under `ebb run`: a worker on the SDK whose
#      stage allocates through Numba; its "[numba_gain] released N MiB" line
#      matches what fakegpu-smi saw go (GPU-wide: this test has its own device).
set -u
: "${EBB:?}" "${EBB_BUILD_DIR:?}" "${EBB_SOURCE_DIR:?}" "${FAKEGPU_SMI:?}"
. "$(dirname "$0")/../lib/common.sh"
PY=/usr/bin/python3
if ! $PY -c 'import numba, numpy' 2> "$T/import.err"; then
  echo "FAIL: $PY cannot import numba and numpy (scripts/install-deps.sh installs python3-numba): $(tail -1 "$T/import.err")" >&2
  exit 1
fi
export PYTHONDONTWRITEBYTECODE=1 EBB_LIB=$EBB_BUILD_DIR/libebb.so
# an ASan build's library needs its runtime loaded first into Python
if grep -q '^EBB_SANITIZE:BOOL=ON' "$EBB_BUILD_DIR/CMakeCache.txt" 2>/dev/null; then
  export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
  export ASAN_OPTIONS=detect_leaks=0
fi

# numba_check.py's late-free check needs the driver to hand a freed
# address out again, as a GPU's does: the fake's quarantine of freed ranges
# (tests/fakegpu/README.md) would keep it from the successor
FAKEGPU_QUARANTINE=0 NUMBA_CUDA_MEMORY_MANAGER=ebb.numba PYTHONPATH=$EBB_SOURCE_DIR/python:$EBB_SOURCE_DIR/tests/python \
  $PY "$EBB_SOURCE_DIR/tests/python/numba_check.py" || fail "numba_check.py"

# --- the Numba worker under ebb run ----------------------------------------------
$PY - "$T/tone.wav" <<'PY'
import math, struct, sys, wave
w = wave.open(sys.argv[1], "wb")
w.setnchannels(1); w.setsampwidth(2); w.setframerate(16000)
w.writeframes(b"".join(struct.pack("<h", int(16000 * math.sin(2 * math.pi * 440 * i / 16000)))
                       for i in range(16000)))
w.close()
PY
cat > "$T/hook.sh" <<'SH'
used=$("$FAKEGPU_SMI" --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
echo "$EBB_HOOK_EVENT $EBB_HOOK_STAGE $EBB_HOOK_RELEASED_BYTES $used" >> "$HOOK_LOG"
SH
export HOOK_LOG="$T/hook.log" EBB_STAGE_HOOK="bash $T/hook.sh"
"$EBB" run --pipeline numba_gain --config "$EBB_SOURCE_DIR/examples/workers/numba.json" \
  "$T/tone.wav" -o "$T/out" --no-cache --device cuda:0 > "$T/log" 2>&1
rc=$?
cat "$T/log" "$T/hook.log"
[ $rc -eq 0 ] || fail "ebb run exited $rc"
peak=$(sed -n 's/^\[numba_gain\] done in .*, peak \([0-9]*\) MiB, host peak [0-9]* MiB$/\1/p' "$T/log")
[ -n "$peak" ] && [ "$peak" -ge 640 ] || fail "done line: peak '${peak}' MiB, expected >= 640 (weights 512 + activations 128)"
grep -q '^\[numba_gain\] scaled 16000 frames by 0.5 on cuda:0$' "$T/log" || fail "no log line from the worker"
n=$(sed -n 's/^\[numba_gain\] released \([0-9]*\) MiB of GPU memory$/\1/p' "$T/log")
before=$(awk '$1 == "before-release" && $2 == "numba_gain" {print $4}' "$T/hook.log")
after=$(awk '$1 == "after-stage" && $2 == "numba_gain" {print $4}' "$T/hook.log")
if [ -z "$n" ] || [ -z "$before" ] || [ -z "$after" ]; then
  fail "release line '$n' or hook figures '$before' '$after' missing"
else
  drop=$((before - after))
  echo "numba_gain: ebb says released $n MiB; fakegpu-smi saw $before -> $after MiB (-$drop)"
  d=$((n - drop)); [ ${d#-} -le 2 ] || fail "released $n MiB but fakegpu-smi saw $drop MiB go"
  [ "$after" -eq 0 ] || fail "after the stage the device holds $after MiB"
fi
$PY - "$T/out/result.json" <<'PY' || fail "result.json"
import json, sys
items = {i["name"]: i for i in json.load(open(sys.argv[1]))["items"]}
a = items["audio_gain"]
assert a["kind"] == "audio" and a["frames"] == 16000, a
PY
ls /dev/shm | grep -q "^ebb-w" && fail "shared memory left behind: $(ls /dev/shm | grep '^ebb-w')"
[ $fails -eq 0 ] && echo "python_numba: ok"
exit $((fails > 0))
