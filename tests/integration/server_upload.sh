#!/usr/bin/env bash
# Uploads: a WAV sent as multipart/form-data runs songtrace (decode ->
# separate -> transcribe -> align -> pitch -> export) and its outputs land in
# DATA_DIR/jobs/ID/out; a raw body with Content-Type audio/wav
# (?pipeline=NAME) and session item uploads work too (songtrace kept loaded
# writes each item's files in that item's directory); an upload over the
# configured limit is 413; a file that is not audio fails its job (decode),
# not the server.
set -u
: "${EBB_BUILD_DIR:?}"
. "$(dirname "$0")/../lib/server.sh"
export FAKEGPU_MEMORY_MIB=16384
unset EBB_WHISPER_URL
WAV=$EBB_BUILD_DIR/samples/demo.wav
[ -f "$WAV" ] || { echo "FAIL: $WAV missing (built by the samples target)"; exit 1; }
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {"echo": {"stages": [{"stage": "synthetic", "name": "e", "options": {"weights_mib": 8}}]}},
 "server": {"max_upload_mib": 1}}
JSON
serve "$T/log" --config "$T/cfg.json" --data-dir "$T/data" --input-dir "$T" --no-cache

# multipart: songtrace on the demo song
req POST /v1/jobs -F pipeline=songtrace -F "file=@$WAV;type=audio/wav"
[ "$CODE" = 202 ] || fail "multipart upload: $CODE $BODY"
J=$(jget "$BODY" '["id"]')
wait_done "$J"
[ "$STATE" = succeeded ] || fail "songtrace on the upload: $STATE: $BODY"
in=$(jget "$BODY" '["input"]')
case $in in "$T/data/jobs/$J/input-demo.wav") ;; *) fail "upload stored at '$in'" ;; esac
cmp -s "$in" "$WAV" || fail "the stored upload differs from the file sent"
req GET "/v1/jobs/$J/result"
for f in pitch.csv songtrace.json result.json; do
  case $BODY in *"/jobs/$J/out/$f"*) ;; *) fail "result lacks $f: $BODY" ;; esac
  [ -s "$T/data/jobs/$J/out/$f" ] || fail "$f not written in the job directory"
done
req GET "/v1/jobs/$J"
n=$(python3 -c 'import json,sys; print(len(json.loads(sys.argv[1])["stages"]))' "$BODY")
[ "$n" = 6 ] || fail "songtrace job lists $n stages' released bytes, expected 6: $BODY"

# raw body, Content-Type audio/wav, pipeline in the query
req POST "/v1/jobs?pipeline=echo" -H 'Content-Type: audio/wav' --data-binary "@$WAV"
[ "$CODE" = 202 ] || fail "raw audio upload: $CODE $BODY"
J2=$(jget "$BODY" '["id"]')
wait_done "$J2"
[ "$STATE" = succeeded ] || fail "raw upload job: $STATE $BODY"
cmp -s "$(jget "$BODY" '["input"]')" "$WAV" || fail "raw upload stored wrongly: $BODY"
req POST "/v1/jobs" -H 'Content-Type: audio/wav' --data-binary "@$WAV"
[ "$CODE" = 400 ] && [ "$(jget "$BODY" '["error"]["code"]')" = bad_request ] || fail "raw upload without pipeline: $CODE $BODY"

# too large (limit 1 MiB)
head -c $((2 << 20)) /dev/zero > "$T/big.wav"
req POST "/v1/jobs?pipeline=echo" -H 'Content-Type: audio/wav' --data-binary "@$T/big.wav"
[ "$CODE" = 413 ] && [ "$(jget "$BODY" '["error"]["code"]')" = body_too_large ] || fail "big upload: $CODE $BODY"
req POST /v1/jobs -F pipeline=echo -F "file=@$T/big.wav;type=audio/wav"
[ "$CODE" = 413 ] || fail "big multipart upload: $CODE $BODY"
[ -z "$(ls "$T/data/uploads")" ] || fail "temp uploads left behind: $(ls "$T/data/uploads")"

# not audio: the job fails at decode, the server goes on
echo "not a wav" > "$T/notes.wav"
req POST /v1/jobs -F pipeline=songtrace -F "file=@$T/notes.wav;type=audio/wav"
J3=$(jget "$BODY" '["id"]')
wait_done "$J3"
[ "$STATE" = failed ] || fail "songtrace on a text file: $STATE"
case $(jget "$BODY" '["error"]["message"]') in *decode*) ;; *) fail "the failure does not name decode: $BODY" ;; esac

# a session item by upload
req POST /v1/sessions -d '{"pipeline": "echo"}'
S=$(jget "$BODY" '["id"]')
req POST "/v1/sessions/$S/items" -F "file=@$WAV;type=audio/wav"
[ "$CODE" = 200 ] && [ "$(jget "$BODY" '["state"]')" = succeeded ] || fail "session item upload: $CODE $BODY"
[ "$(jget "$BODY" '["result"]["items"][1]["value"]["stage"]')" = e ] || fail "item result: $BODY"
req DELETE "/v1/sessions/$S"
# songtrace kept loaded: an item's files land in that item's directory
req POST /v1/sessions -d '{"pipeline": "songtrace"}'
[ "$CODE" = 201 ] || fail "session on songtrace: $CODE $BODY"
S=$(jget "$BODY" '["id"]')
for i in 1 2; do
  req POST "/v1/sessions/$S/items" -F "file=@$WAV;type=audio/wav"
  [ "$CODE" = 200 ] || fail "songtrace item $i: $CODE $BODY"
  d=$(jget "$BODY" '["output_dir"]')
  [ -s "$d/songtrace.json" ] && [ -s "$d/pitch.csv" ] || fail "songtrace item $i: no outputs in its directory $d: $(ls "$d" 2>&1)"
done
req DELETE "/v1/sessions/$S"
req POST /v1/pipelines/songtrace/unload
[ "$CODE" = 200 ] || fail "unload songtrace: $CODE $BODY"
req GET /healthz
[ "$CODE" = 200 ] || fail "healthz at the end: $CODE"
stop_server; rc=$?
[ "$rc" = 0 ] || fail "ebb serve exited $rc on SIGTERM"
if [ "$fails" -ne 0 ]; then echo "--- server log"; cat "$T/log"; exit 1; fi
echo "server_upload: all checks passed"
