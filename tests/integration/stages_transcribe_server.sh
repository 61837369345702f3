#!/usr/bin/env bash
# The Whisper test server as a program (tests/whisper_server), driven by an
# independent HTTP client (the curl tool): it picks a free port and prints it,
# accepts curl's multipart uploads on both endpoints, answers times that follow
# the uploaded duration, rejects what a real server would, enforces an API key,
# counts requests per key, and stops on SIGTERM.
set -euo pipefail
. "$(dirname "$0")/../lib/lock.sh"
TMP="$EBB_TEST_TMP"
rm -rf "$TMP" && mkdir -p "$TMP"
fail() { echo "FAIL: $*" >&2; exit 1; }
. "$(dirname "$0")/../lib/whisper.sh"
command -v curl >/dev/null || fail "the curl tool is missing (scripts/install-deps.sh installs it)"

python3 - "$TMP/a.wav" "$TMP/stereo.wav" <<'PY'
import math, struct, sys, wave
def write(path, rate, ch, secs):
    w = wave.open(path, "wb")
    w.setnchannels(ch); w.setsampwidth(2); w.setframerate(rate)
    n = int(rate * secs)
    w.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(i * 0.05))) * ch for i in range(n)))
    w.close()
write(sys.argv[1], 16000, 1, 2.5)
write(sys.argv[2], 44100, 2, 1.0)
PY
echo "not a wav" >"$TMP/bad.wav"

start_whisper "$TMP/s1.out"
BASE="http://127.0.0.1:$PORT"

# whisper.cpp endpoint: the canned answer's last word ends at D*4.8/5 = 2.4 s
code=$(curl -sS -o "$TMP/r1.json" -w '%{http_code}' -F "file=@$TMP/a.wav;type=audio/wav" \
  -F response_format=verbose_json "$BASE/inference?key=k1")
[ "$code" = 200 ] || fail "/inference answered $code: $(cat "$TMP/r1.json")"
python3 - "$TMP/r1.json" <<'PY' || fail "unexpected /inference answer: $(cat "$TMP/r1.json")"
import json, sys
j = json.load(open(sys.argv[1]))
assert abs(j["duration"] - 2.5) < 1e-3, j["duration"]
w = j["segments"][0]["words"]
assert [x["word"] for x in w][:2] == [" hel", "lo"], w
assert abs(w[-1]["end"] - 2.4) < 0.006, w[-1]
PY

# OpenAI endpoint with the fields the stage sends
code=$(curl -sS -o "$TMP/r2.json" -w '%{http_code}' -F "file=@$TMP/a.wav;type=audio/wav" \
  -F model=whisper-1 -F response_format=verbose_json -F 'timestamp_granularities[]=word' \
  "$BASE/v1/audio/transcriptions?key=k1")
[ "$code" = 200 ] || fail "/v1 answered $code: $(cat "$TMP/r2.json")"
python3 - "$TMP/r2.json" <<'PY' || fail "unexpected /v1 answer: $(cat "$TMP/r2.json")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["text"] == "hello from whisper test server", j["text"]
assert [round(x["start"], 3) for x in j["words"]] == [0.0, 0.5, 1.0, 1.5, 2.0], j["words"]
PY

# what a real server rejects
expect_400() { # name expected-message curl-args...
  local name=$1 msg=$2; shift 2
  code=$(curl -sS -o "$TMP/e.json" -w '%{http_code}' "$@")
  [ "$code" = 400 ] || fail "$name: answered $code, want 400: $(cat "$TMP/e.json")"
  grep -q "$msg" "$TMP/e.json" || fail "$name: message lacks '$msg': $(cat "$TMP/e.json")"
}
expect_400 "not a WAV" "not a RIFF/WAVE file" -F "file=@$TMP/bad.wav;type=audio/wav" \
  -F response_format=verbose_json "$BASE/inference?key=k1"
expect_400 "44.1 kHz stereo to whisper.cpp" "wants 16 kHz mono WAV, got 44100 Hz 2 channels" \
  -F "file=@$TMP/stereo.wav;type=audio/wav" -F response_format=verbose_json "$BASE/inference?key=k1"
expect_400 "no model" "must provide a model" -F "file=@$TMP/a.wav;type=audio/wav" \
  -F response_format=verbose_json -F 'timestamp_granularities[]=word' "$BASE/v1/audio/transcriptions?key=k1"
expect_400 "no file" "no multipart part named file" -F model=whisper-1 \
  -F response_format=verbose_json "$BASE/v1/audio/transcriptions?key=k1"

stats=$(curl -sS "$BASE/stats?key=k1")
echo "$stats" | grep -q '"requests":6' || fail "stats for k1 should count 6 requests: $stats"

# hang-up: the connection closes without an answer (curl exit 52: empty reply)
set +e
curl -sS -o /dev/null -F "file=@$TMP/a.wav;type=audio/wav" "$BASE/inference?mode=hangup" 2>"$TMP/hang.err"
rc=$?
set -e
[ "$rc" = 52 ] || fail "hangup: curl exited $rc, want 52 (empty reply): $(cat "$TMP/hang.err")"

# SIGTERM stops it promptly, even with a slow request in flight
curl -sS -o /dev/null -m 20 -F "file=@$TMP/a.wav;type=audio/wav" -F response_format=verbose_json \
  "$BASE/inference?mode=slow&sleep=20" 2>/dev/null &
pids+=($!)
sleep 0.3
kill -TERM "$PID"
t0=$(date +%s%N)
wait "$PID" || fail "server exited with status $? on SIGTERM"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$ms" -lt 3000 ] || fail "server took $ms ms to stop with a slow request in flight"

# API key
start_whisper "$TMP/s2.out" --api-key sekret
BASE="http://127.0.0.1:$PORT"
code=$(curl -sS -o "$TMP/k.json" -w '%{http_code}' -F "file=@$TMP/a.wav;type=audio/wav" \
  -F model=whisper-1 -F response_format=verbose_json -F 'timestamp_granularities[]=word' \
  "$BASE/v1/audio/transcriptions")
[ "$code" = 401 ] || fail "no key: answered $code, want 401"
grep -q "Incorrect API key" "$TMP/k.json" || fail "401 message: $(cat "$TMP/k.json")"
code=$(curl -sS -o "$TMP/k.json" -w '%{http_code}' -H "Authorization: Bearer sekret" \
  -F "file=@$TMP/a.wav;type=audio/wav" -F model=whisper-1 -F response_format=verbose_json \
  -F 'timestamp_granularities[]=word' "$BASE/v1/audio/transcriptions")
[ "$code" = 200 ] || fail "with key: answered $code: $(cat "$TMP/k.json")"
kill -TERM "$PID"; wait "$PID" || fail "second server exited with status $?"
echo "ok: whisper_server program behaves"
