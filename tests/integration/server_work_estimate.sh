#!/bin/bash
# Refusal at submit by estimated work (issue 31, "Deadlines that hold"): on
# a GPU server nothing is refused by default; on a CPU-only server with
# --job-timeout 8, the issue's {"pitch": {"hop": 1, "frame":
# 65536}} on a 5-minute input is refused with 400 bad_request naming the
# stage, its options, the input's length, the estimate and the limit (as a
# JSON job and as an upload), and nothing is stored; a job of default
# options whose estimate fits (decode) is accepted and runs; a plugin stage
# built against the old struct (no work hook) is accepted and runs.
# --max-job-seconds sets the limit apart from the timeout (a default pitch
# job, about 22 s of work, is taken under 60) and 0 turns the refusal off.
# Session items are held to the same limit as jobs. The estimate counts the
# lyrics (100,000 words, sent with the job or the operator's file: refused
# under --max-job-seconds 10; 300 words taken).
set -u
: "${EBB:?}" "${EBB_BUILD_DIR:?}" "${EBB_TEST_PLUGIN_DIR:?}"
. "$(dirname "$0")/../lib/server.sh"
export no_proxy=127.0.0.1,localhost NO_PROXY=127.0.0.1,localhost

# a 5-minute input: 10 s from the project's song generator, 30 times
"$EBB_BUILD_DIR/songgen" --seed 5 --seconds 10 "$T" s >/dev/null || { fail "songgen failed"; exit 1; }
python3 - "$T/s.wav" "$T/input.wav" <<'PY' || { fail "cannot build the 5-minute input"; exit 1; }
import sys, wave
r = wave.open(sys.argv[1]); p = r.getparams(); d = r.readframes(p.nframes)
w = wave.open(sys.argv[2], "wb"); w.setparams(p); w.writeframes(d * 30); w.close()
PY
# lyrics of 100,000 words (songgen's, repeated) and of 300
python3 - "$T/s.lyrics.txt" "$T/words100k.txt" "$T/words300.txt" <<'PY' || fail "cannot write the lyrics"
import sys
lines = [l for l in open(sys.argv[1]).read().splitlines() if l.strip()]
for path, n in ((sys.argv[2], 100000), (sys.argv[3], 300)):
    out, count, i = [], 0, 0
    while count < n:
        out.append(lines[i % len(lines)]); count += len(lines[i % len(lines)].split()); i += 1
    open(path, "w").write("\n".join(out) + "\n")
PY
printf '%s\n' "{\"plugin_dirs\": [\"$EBB_TEST_PLUGIN_DIR/old_size\"],
 \"server\": {\"max_lyrics_kib\": 2048},
 \"pipelines\": {
  \"al\": {\"stages\": [{\"stage\": \"decode\"}, {\"stage\": \"align\"}]},
  \"alop\": {\"stages\": [{\"stage\": \"decode\"},
    {\"stage\": \"align\", \"options\": {\"lyrics\": \"$T/words100k.txt\"}}]},
  \"p384\": {\"stages\": [{\"stage\": \"decode\"}, {\"stage\": \"pitch\", \"options\": {\"rate\": 384000}}]},
  \"pitch\": {\"stages\": [{\"stage\": \"decode\"}, {\"stage\": \"pitch\"}]},
  \"dec\": {\"stages\": [{\"stage\": \"decode\"}]},
  \"old\": {\"stages\": [{\"stage\": \"echo\"}]}}}" >"$T/cfg.json"
COSTLY='{"pitch": {"hop": 1, "frame": 65536}}'

# submit PIPELINE [OPTIONS]: sets CODE, BODY
submit() {
  local o=${2:-"{}"}
  req POST /v1/jobs -d "{\"pipeline\": \"$1\", \"input\": \"$T/input.wav\", \"options\": $o}"
}
# refused WHAT LIMIT FROM: the last answer is the refusal with the figures
refused() {
  [ "$CODE" = 400 ] || { fail "$1: expected 400, got $CODE $BODY"; return 1; }
  [ "$(jget "$BODY" '["error"]["code"]')" = bad_request ] || fail "$1: not bad_request: $BODY"
  local msg want
  msg=$(jget "$BODY" '["error"]["message"]')
  for want in "pitch with hop 1, frame 65536" "on 300 s of audio" "estimated " \
    "over this server's limit of $2 s ($3)"; do
    case $msg in *"$want"*) ;; *) fail "$1: the refusal does not say '$want': $msg" ;; esac
  done
  # the estimate itself: a figure far over the limit
  python3 - "$msg" "$2" <<'PY' || fail "$1: no estimate far over the limit in: $msg"
import re, sys
m = re.search(r"estimated ([0-9.]+) (s|h) of work", sys.argv[1])
est = float(m.group(1)) * (3600 if m.group(2) == "h" else 1)
sys.exit(0 if est > 100 * float(sys.argv[2]) else 1)
PY
  echo "--- $1: $msg"
}

# 0. on the (fake) GPU nothing is refused by its estimate unless the operator
# sets --max-job-seconds: the estimate is CPU seconds (--job-timeout ends it)
serve "$T/serve0.log" --config "$T/cfg.json" --data-dir "$T/data0" --input-dir "$T" \
  --job-timeout 8 --no-cache
submit pitch "$COSTLY"
[ "$CODE" = 202 ] || fail "on a GPU server the costly job was refused by default: $CODE $BODY"
stop_server || fail "the GPU server did not stop cleanly"
# a CPU-only server: the limit is the job's deadline
serve "$T/serve.log" --config "$T/cfg.json" --data-dir "$T/data" --input-dir "$T" \
  --devices cpu --job-timeout 8 --no-cache
# 1. the costly options: refused at submit, nothing stored
submit pitch "$COSTLY"
refused "JSON job" 8 --job-timeout
n=$(find "$T/data/jobs" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
[ "$n" = 0 ] || fail "a refused job left $n job directories in the data dir"
! grep -q ": queued" "$T/serve.log" || fail "a refused job was queued: $(grep ': queued' "$T/serve.log")"
# the same as an upload (sized from the uploaded file's header)
BODY=$(curl -s -o - -w '\n%{http_code}' -X POST "$URL/v1/jobs" -F pipeline=pitch \
  -F "options=$COSTLY" -F "file=@$T/input.wav;type=audio/wav")
CODE=${BODY##*$'\n'} BODY=${BODY%$'\n'*}
refused "upload" 8 --job-timeout
# 2. default options whose estimate fits: accepted and run
submit dec
[ "$CODE" = 202 ] || fail "the default decode job was not accepted: $CODE $BODY"
ID=$(jget "$BODY" '["id"]')
wait_done "$ID" && { [ "$STATE" = succeeded ] || fail "the default decode job ended $STATE: $BODY"; }
# 3. a plugin stage without the work hook (the old struct): accepted, runs
submit old
[ "$CODE" = 202 ] || fail "the old plugin stage's job was not accepted: $CODE $BODY"
ID=$(jget "$BODY" '["id"]')
wait_done "$ID" && { [ "$STATE" = succeeded ] || fail "the old plugin stage's job ended $STATE: $BODY"; }
grep -q "job refused: pitch estimated" "$T/serve.log" ||
  fail "the refusal is not in the log: $(tail -5 "$T/serve.log")"
stop_server || fail "the server did not stop cleanly"

# 4. --max-job-seconds 60: the default pitch job (about 22 s) is taken, the
# costly one refused naming the flag
serve "$T/serve2.log" --config "$T/cfg.json" --data-dir "$T/data2" --input-dir "$T" \
  --job-timeout 8 --max-job-seconds 60 --no-cache
submit pitch "$COSTLY"
refused "--max-job-seconds 60" 60 --max-job-seconds
# a session item is held to the same limit: the costly options refused
# with the figures, nothing run; a default decode item is taken and runs
req POST /v1/sessions -d '{"pipeline": "pitch"}'
[ "$CODE" = 201 ] || fail "opening a session on pitch: $CODE $BODY"
SID=$(jget "$BODY" '["id"]')
req POST "/v1/sessions/$SID/items" -d "{\"input\": \"$T/input.wav\", \"options\": $COSTLY}"
refused "session item" 60 --max-job-seconds
n=$(find "$T/data2/sessions" -mindepth 2 -maxdepth 2 2>/dev/null | wc -l)
[ "$n" = 0 ] || fail "a refused session item left $n item directories"
req DELETE "/v1/sessions/$SID"
req POST /v1/sessions -d '{"pipeline": "dec"}'
[ "$CODE" = 201 ] || fail "opening a session on dec: $CODE $BODY"
SID=$(jget "$BODY" '["id"]')
req POST "/v1/sessions/$SID/items" -d "{\"input\": \"$T/input.wav\"}"
[ "$CODE" = 200 ] || fail "a default decode session item under --max-job-seconds 60: $CODE $BODY"
req DELETE "/v1/sessions/$SID"
submit pitch
[ "$CODE" = 202 ] || fail "the default pitch job under --max-job-seconds 60: $CODE $BODY"
stop_server || fail "the second server did not stop cleanly"

# 6. the estimate counts every input that scales the work (issue 45): the
# job's lyrics (100,000 words sent with it, or the operator's file) and
# pitch's resampling to 384 kHz, refused under --max-job-seconds 10 naming
# the estimate; 300 words are taken
serve "$T/serve4.log" --config "$T/cfg.json" --data-dir "$T/data4" --input-dir "$T" \
  --max-job-seconds 10 --no-cache
# lyrics_job FILE: the align job with FILE's text as its "lyrics"
lyrics_job() {
  python3 -c 'import json,sys; print(json.dumps({"pipeline": "al", "input": sys.argv[1],
    "lyrics": open(sys.argv[2]).read()}))' "$T/input.wav" "$1" > "$T/job.json"
  req POST /v1/jobs -d "@$T/job.json"
}
for how in "sent with the job" "the operator's file"; do
  if [ "$how" = "sent with the job" ]; then lyrics_job "$T/words100k.txt"; else submit alop; fi
  msg=$(jget "$BODY" '["error"]["message"]')
  echo "--- align with 100,000 words ($how): $CODE $msg"
  [ "$CODE" = 400 ] || fail "align with 100,000 words of lyrics ($how) under --max-job-seconds 10: $CODE $BODY"
  case $msg in *"align with 1000"[0-9][0-9]" words of lyrics"*"estimated "*"(--max-job-seconds)"*) ;;
  *) fail "the refusal ($how) does not name the words, the estimate and the flag: $msg" ;; esac
done
lyrics_job "$T/words300.txt"
[ "$CODE" = 202 ] || fail "align with 300 words of lyrics under --max-job-seconds 10: $CODE $BODY"
submit p384
msg=$(jget "$BODY" '["error"]["message"]')
echo "--- pitch at 384 kHz: $CODE $msg"
[ "$CODE" = 400 ] || fail "pitch at 384 kHz on 300 s under --max-job-seconds 10: $CODE $BODY"
stop_server || fail "the fourth server did not stop cleanly"

# 5. --max-job-seconds 0: no refusal by estimate (--job-timeout ends it)
serve "$T/serve3.log" --config "$T/cfg.json" --data-dir "$T/data3" --input-dir "$T" \
  --job-timeout 1 --max-job-seconds 0 --no-cache
submit pitch "$COSTLY"
[ "$CODE" = 202 ] || fail "--max-job-seconds 0 still refused: $CODE $BODY"
stop_server || fail "the third server did not stop cleanly"
"$EBB" serve --max-job-seconds -3 >/dev/null 2>"$T/usage.err"
[ $? = 2 ] || fail "--max-job-seconds -3 was taken"
grep -q "max-job-seconds" "$T/usage.err" || fail "the usage error does not name the flag: $(cat "$T/usage.err")"

if [ "$fails" -ne 0 ]; then echo "--- server log"; tail -30 "$T/serve.log"; exit 1; fi
echo "server_work_estimate: all checks passed"
