#!/usr/bin/env bash
# The transcribe stage inside `ebb run --pipeline songtrace`, against the test
# Whisper server: skipped without a server (and that skip is not cached), a
# transcript when EBB_WHISPER_URL is set (cached on the next run), a clear job
# failure when the server refuses, and on the fake GPU: separate's release is
# logged before transcribe starts, and during the whole wait on the server the
# ebb process holds no device memory beyond its context.
set -euo pipefail
. "$(dirname "$0")/../lib/stages.sh"
. "$(dirname "$0")/../lib/whisper.sh"

start_whisper "$TMP/server.out"
BASE="http://127.0.0.1:$PORT"
requests() { python3 -c 'import json,sys; print(json.load(sys.stdin)["requests"])' \
  < <(python3 -c 'import sys,urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())' "$BASE/stats?key=$1"); }

python3 - "$TMP/song.wav" <<'PY'
import math, struct, sys, wave
w = wave.open(sys.argv[1], "wb")
w.setnchannels(1); w.setsampwidth(2); w.setframerate(22050)
w.writeframes(b"".join(struct.pack("<h", int(6000 * math.sin(i * 0.06))) for i in range(22050 * 4)))
w.close()
PY
CACHE="$TMP/cache"

# 1. no server: skipped, the job succeeds, no transcript
"$EBB" run --pipeline songtrace --device cpu --cache-dir "$CACHE" "$TMP/song.wav" -o "$TMP/o1" \
  >"$TMP/r1.log" 2>&1 || fail "run without a server failed: $(cat "$TMP/r1.log")"
grep -q '^\[transcribe\] skipped: no Whisper server configured (set the stage option url or EBB_WHISPER_URL)$' \
  "$TMP/r1.log" || fail "no skip line: $(cat "$TMP/r1.log")"
grep -q '"name": *"transcript"' "$TMP/o1/result.json" && fail "a skipped stage added a transcript"

# 2. the server is set now: transcribed, not served from the cache of run 1
EBB_WHISPER_URL="$BASE/inference?key=run2" "$EBB" run --pipeline songtrace --device cpu \
  --cache-dir "$CACHE" "$TMP/song.wav" -o "$TMP/o2" >"$TMP/r2.log" 2>&1 ||
  fail "run with a server failed: $(cat "$TMP/r2.log")"
grep -q '^\[transcribe\] transcribed 4.0 s of "vocals": 5 words, 1 segments, language en' "$TMP/r2.log" ||
  fail "no transcription in run 2 (the skip of run 1 was cached?): $(cat "$TMP/r2.log")"
[ "$(requests run2)" = 1 ] || fail "server saw $(requests run2) requests for run 2, want 1"
python3 - "$TMP/o2/result.json" <<'PY' || fail "transcript item is wrong: $(head -c 2000 "$TMP/o2/result.json")"
import json, sys
items = {i["name"]: i for i in json.load(open(sys.argv[1]))["items"]}
t = items["transcript"]["value"]
assert t["protocol"] == "whispercpp" and t["language"] == "en", t
assert [w["word"] for w in t["words"]] == ["hello", "from", "whisper", "test", "server."], t["words"]
assert abs(t["words"][-1]["end"] - 4.0 * 4.8 / 5) < 0.011, t["words"][-1]
PY

# 3. same input and options again: the transcript comes from the cache
EBB_WHISPER_URL="$BASE/inference?key=run2" "$EBB" run --pipeline songtrace --device cpu \
  --cache-dir "$CACHE" "$TMP/song.wav" -o "$TMP/o3" >"$TMP/r3.log" 2>&1 ||
  fail "run 3 failed: $(cat "$TMP/r3.log")"
grep -q '^\[transcribe\] cached$' "$TMP/r3.log" || fail "run 3 did not use the cache: $(cat "$TMP/r3.log")"
[ "$(requests run2)" = 1 ] || fail "the cached run still called the server"

# 4. a server that refuses: the job fails (exit 1) naming the URL and the server's message
cat >"$TMP/cfg.json" <<EOF2
{"pipelines": {"st": {"stages": [{"stage": "decode"}, {"stage": "separate"},
  {"stage": "transcribe", "options": {"url": "$BASE/v1/audio/transcriptions?mode=error400&key=run4", "retries": 2}}]}}}
EOF2
set +e
"$EBB" run --config "$TMP/cfg.json" --pipeline st --device cpu --no-cache "$TMP/song.wav" \
  -o "$TMP/o4" >"$TMP/r4.log" 2>&1
rc=$?
set -e
[ "$rc" = 1 ] || fail "a refused request should fail the job with exit 1, got $rc: $(cat "$TMP/r4.log")"
grep -q "answered HTTP 400" "$TMP/r4.log" ||
  fail "failure does not carry the server's status: $(cat "$TMP/r4.log")"
! grep -q "rejected on purpose" "$TMP/r4.log" ||
  fail "failure echoes the remote's error body: $(cat "$TMP/r4.log")"
grep -q "$BASE/v1/audio/transcriptions" "$TMP/r4.log" || fail "failure does not name the URL"
[ "$(requests run4)" = 1 ] || fail "HTTP 400 was retried: $(requests run4) requests"

# 5. fake GPU: nothing held on the device while transcribe waits 3 s on the server
EBB_WHISPER_URL="$BASE/inference?mode=slow&sleep=3&key=run5" "$EBB" run --pipeline songtrace \
  --device cuda --no-cache "$TMP/song.wav" -o "$TMP/o5" >"$TMP/r5.log" 2>&1 &
epid=$!
pids+=($epid)
for _ in $(seq 200); do
  [ "$(requests run5)" = 1 ] && break
  sleep 0.05
done
[ "$(requests run5)" = 1 ] || fail "transcribe never reached the server: $(cat "$TMP/r5.log")"
sleep 0.5 # well inside the 3 s wait
apps=$("$FAKEGPU_SMI" --query-compute-apps=pid,used_memory --format=csv,noheader,nounits)
used=$(echo "$apps" | awk -F', *' -v p="$epid" '$1 == p {print $2}')
wait "$epid" || fail "fake-GPU run failed: $(cat "$TMP/r5.log")"
ctx=${FAKEGPU_CONTEXT_MIB:-300}
echo "device memory of ebb while transcribe waits: ${used:-0} MiB (context ${ctx} MiB)"
[ "${used:-0}" -le "$ctx" ] ||
  fail "ebb held ${used} MiB (more than its ${ctx} MiB context) while waiting on the server"
rel=$(grep -n '^\[separate\] released [0-9]* MiB of GPU memory$' "$TMP/r5.log" | cut -d: -f1 | head -1)
tr=$(grep -n '^stage 3/6 transcribe$' "$TMP/r5.log" | cut -d: -f1 | head -1)
[ -n "$rel" ] && [ -n "$tr" ] && [ "$rel" -lt "$tr" ] ||
  fail "no '[separate] released N MiB' line before transcribe: $(cat "$TMP/r5.log")"
grep -q '^\[transcribe\] done in [0-9.]* s, peak 0 MiB, host peak [0-9]* MiB$' "$TMP/r5.log" ||
  fail "transcribe's peak device memory is not 0: $(grep transcribe "$TMP/r5.log")"
echo "ok: transcribe in songtrace"
