#!/usr/bin/env bash
# What a job may carry (docs/api.md, "Security"; issue 31): operator-only
# stage options (a server path, a URL, a credential, a limit) set by a job
# get 400 bad_request naming the option unless the pipeline's
# "allow_options" names them; an allowed path is opened under --input-dir
# (no symlink, no FIFO, no directory, no hard link to elsewhere) and the
# stage reads the server's copy; an allowed URL goes only to
# "allow_url_hosts", and a remote's error body is not shown to the job;
# no control character reaches a header; lyrics travel with the job (JSON
# or a multipart part, capped, stored in the job's directory, read by
# align); the input is opened once at submit (a file swapped for a symlink
# afterwards is not what the job reads); session items are held to the same.
set -u
. "$(dirname "$0")/../lib/server.sh"
SONGGEN="$EBB_BUILD_DIR/songgen"
WHISPER="$EBB_BUILD_DIR/tests/whisper_server"
export FAKEGPU_MEMORY_MIB=4096 FAKEGPU_CONTEXT_MIB=300 no_proxy=127.0.0.1 NO_PROXY=127.0.0.1
unset EBB_TOKEN EBB_WHISPER_URL EBB_WHISPER_API_KEY
mkdir -p "$T/in/sub" "$T/out"
WPID=
trap 'stop_server >/dev/null 2>&1 || true; [ -z "$WPID" ] || kill "$WPID" 2>/dev/null' EXIT
"$WHISPER" > "$T/whisper.out" 2> "$T/whisper.err" &
WPID=$!
for _ in $(seq 100); do
  WPORT=$(sed -n 's/^PORT \([0-9][0-9]*\)$/\1/p' "$T/whisper.out"); [ -n "$WPORT" ] && break; sleep 0.05
done
[ -n "$WPORT" ] || { fail "the test Whisper server printed no port"; exit 1; }
"$SONGGEN" --seed 2 --seconds 6 "$T/in" song > /dev/null || { fail "songgen failed"; exit 1; }
echo "secret outside" > "$T/out/secret.txt"
echo "Hello from the" > "$T/in/words.txt"
ln -s "$T/out/secret.txt" "$T/in/link.txt"
ln "$T/out/secret.txt" "$T/in/hard.txt"
mkfifo "$T/in/fifo"
head -c $((2 * 1024 * 1024)) /dev/zero > "$T/in/big.wav"
W="http://127.0.0.1:$WPORT/inference"
cat > "$T/cfg.json" <<JSON
{"pipelines": {
  "song": {"stages": [{"stage": "decode"}, {"stage": "separate"},
    {"stage": "transcribe", "options": {"url": "$W"}},
    {"stage": "align"}, {"stage": "export", "options": {"formats": "json,lrc", "stems": "none"}}]},
  "open": {"allow_options": ["align.lyrics", "transcribe.url", "transcribe.api_key"],
    "allow_url_hosts": ["127.0.0.1:$WPORT"],
    "stages": [{"stage": "decode"}, {"stage": "separate"},
    {"stage": "transcribe", "options": {"url": "$W"}},
    {"stage": "align"}, {"stage": "export", "options": {"formats": "json,lrc", "stems": "none"}}]},
  "wait": {"stages": [{"stage": "synthetic", "name": "w", "options": {"weights_mib": 8, "activations_mib": 8, "run_ms": 1500}}]},
  "quick": {"stages": [{"stage": "synthetic", "name": "q", "options": {"weights_mib": 8, "activations_mib": 8}}]}},
 "server": {"max_upload_mib": 1}}
JSON
serve "$T/log" --config "$T/cfg.json" --data-dir "$T/data" --no-cache --input-dir "$T/in"
J='Content-Type: application/json'
SONG="$T/in/song.wav"
# (no python per request: on a loaded machine its start costs a second)
field() { sed -n 's/.*"'"$1"'":"\([^"]*\)".*/\1/p' <<< "$BODY" | head -1; }
expect() { # what status [code] [text in the message]
  [ "$CODE" = "$2" ] || fail "$1: HTTP $CODE, expected $2 (body: $BODY)"
  [ -z "${3:-}" ] || [[ $BODY == *"\"code\":\"$3\""* ]] || fail "$1: error code not $3: $BODY"
  [ -z "${4:-}" ] || [[ $BODY == *"$4"* ]] || fail "$1: the message does not say '$4': $BODY"
}
# wait_done ID: polls the job until it ended; STATE, BODY
wait_done() {
  STATE=
  for _ in $(seq 300); do
    req GET "/v1/jobs/$1"; STATE=$(field state)
    case $STATE in succeeded|failed|cancelled) return 0 ;; esac
    sleep 0.1
  done
  fail "job $1 did not end in 30 s: $BODY"
}
job() { # pipeline options-json [extra body keys]
  req POST /v1/jobs -d "{\"pipeline\": \"$1\", \"input\": \"$SONG\", \"options\": $2${3:+, $3}}"
}
jobdir() { echo "$T/data/jobs/$(field id)"; }

# --- operator-only options a job sets: 400 naming the option, nothing read or sent
job song '{"align": {"lyrics": "/etc/passwd"}}'
expect "a job setting align.lyrics" 400 bad_request "option align.lyrics is operator-only"
[[ $BODY == *'send lyrics with a job'* ]] || fail "the align.lyrics refusal does not say how to send lyrics with a job: $BODY"
job song '{"transcribe": {"url": "http://127.0.0.1:1/steal"}}'
expect "a job setting transcribe.url" 400 bad_request "option transcribe.url is operator-only"
job song '{"transcribe": {"api_key": "x\r\nX-Injected: yes"}}'
expect "a job setting transcribe.api_key" 400 bad_request "option transcribe.api_key is operator-only"
job song '{"decode": {"max_seconds": 86400}}'
expect "a job raising decode.max_seconds" 400 bad_request "option decode.max_seconds is operator-only"
job song '{"transcribe": {"retries": 20}}'
expect "a job raising transcribe.retries" 400 bad_request "option transcribe.retries is operator-only"
job song '{"align": {"snap_ms": 100}, "separate": {"hop": 512}}'
expect "job-settable options" 202

# --- allowed by the operator: still checked
job open '{"transcribe": {"api_key": "x\r\nX-Injected: yes"}}'
expect "an allowed api_key with CR LF" 400 bad_request "transcribe.api_key: the value holds a control character"
job open '{"transcribe": {"url": "http://127.0.0.1:'"$WPORT"'/inference\r\nX-Injected: yes"}}'
expect "an allowed url with CR LF" 400 bad_request "transcribe.url: the value holds a control character"
job open '{"transcribe": {"url": "http://169.254.169.254/latest/meta-data"}}'
expect "an allowed url to a host not listed" 400 bad_request "host 169.254.169.254 is not one this server sends to"
job open '{"transcribe": {"url": "http://127.0.0.1:1/x"}}'
expect "an allowed url to another port" 400 bad_request "transcribe.url"
job open '{"transcribe": {"url": "http://127.0.0.1:'"$WPORT"'@10.0.0.1/x"}}'
expect "an allowed url with user@ before the real host" 400 bad_request "transcribe.url"
job open '{"align": {"lyrics": "/etc/passwd"}}'
expect "an allowed lyrics path outside --input-dir" 400 bad_request "not a readable regular file under"
msg_passwd=$(field message)
job open '{"align": {"lyrics": "/etc/no-such-file-here"}}'
msg_missing=$(field message)
[ "${msg_passwd//\/etc\/passwd/X}" = "${msg_missing//\/etc\/no-such-file-here/X}" ] ||
  fail "an existing and a missing file are refused differently (an existence oracle): '$msg_passwd' / '$msg_missing'"
job open "{\"align\": {\"lyrics\": \"$T/in/link.txt\"}}"
expect "an allowed lyrics path that is a symlink out" 400 bad_request "no symbolic links"
job open "{\"align\": {\"lyrics\": \"$T/in/../out/secret.txt\"}}"
expect "an allowed lyrics path with .. out" 400 bad_request "align.lyrics"
job open "{\"align\": {\"lyrics\": \"$T/in/hard.txt\"}}"
expect "an allowed lyrics path that is a hard link to an outside file" 400 bad_request "more than one hard link"
t0=$(date +%s)
job open "{\"align\": {\"lyrics\": \"$T/in/fifo\"}}"
expect "an allowed lyrics path that is a FIFO" 400 bad_request "align.lyrics"
[ $(($(date +%s) - t0)) -le 2 ] || fail "a FIFO as lyrics held the request $(($(date +%s) - t0)) s"
job open "{\"align\": {\"lyrics\": \"$T/in/sub\"}}"
expect "an allowed lyrics path that is a directory" 400 bad_request "align.lyrics"
job open "{\"align\": {\"lyrics\": \"$T/in/big.wav\"}}"
expect "an allowed lyrics path over the size cap" 400 bad_request "more than the 1048576"
job open "{\"align\": {\"lyrics\": \"$T/in/words.txt\"}}"
expect "an allowed lyrics path in --input-dir" 202
ID=$(field id); D=$(jobdir)
[ "$(cat "$D/option-align.lyrics" 2>/dev/null)" = "Hello from the" ] ||
  fail "the allowed lyrics file was not copied into the job's directory: $(ls "$D")"
wait_done "$ID"
[ "$STATE" = succeeded ] || fail "the job with allowed lyrics ended '$STATE': $BODY"

# --- the remote's error body never reaches the job
job open '{"transcribe": {"url": "http://127.0.0.1:'"$WPORT"'/inference?mode=error400"}}'
expect "an allowed url (the test server rejects it)" 202
ID=$(field id)
wait_done "$ID"
[ "$STATE" = failed ] || fail "the job against a rejecting Whisper server ended '$STATE'"
[[ $BODY == *"answered HTTP 400"* ]] || fail "the job's error does not give the remote's status: $BODY"
[[ $BODY != *"rejected on purpose"* ]] || fail "the remote's error body came back to the job: $BODY"

# --- lyrics with the job: JSON, multipart, capped; align reads them
printf -v LY 'Hello from the\\nwhisper test server'
job song '{}' "\"lyrics\": \"$LY\""
expect "a job with JSON lyrics" 202
ID=$(field id); D=$(jobdir)
[ "$(cat "$D/lyrics.txt" 2>/dev/null)" = $'Hello from the\nwhisper test server' ] ||
  fail "the JSON lyrics are not stored as DATA/jobs/ID/lyrics.txt: $(cat "$D/lyrics.txt" 2>&1)"
wait_done "$ID"
[ "$STATE" = succeeded ] || fail "the job with JSON lyrics ended '$STATE': $BODY"
# the store keeps the options that name the job's copy (a restart runs those)
[[ $BODY == *"\"lyrics\":\"$D/lyrics.txt\""* ]] || fail "the stored options do not name the stored lyrics: $BODY"
lrc=$(sed 's/^\[[0-9:.]*\]//' "$D/out/lyrics.lrc" 2>/dev/null | sed 's/<[0-9:.]*> *//g')
[ "$lrc" = $'Hello from the\nwhisper test server' ] ||
  fail "lyrics.lrc does not hold the job's lyrics lines: '$lrc' ($(ls "$D/out"))"
req POST /v1/jobs -F pipeline=song -F "lyrics=<$T/in/words.txt" -F "file=@$SONG;type=audio/wav"
expect "an upload with a multipart lyrics part" 202
D=$(jobdir)
[ "$(cat "$D/lyrics.txt" 2>/dev/null)" = "Hello from the" ] || fail "the multipart lyrics part was not stored"
python3 -c 'import json; print(json.dumps({"pipeline": "song", "input": "'"$SONG"'", "lyrics": "la " * 90000}))' > "$T/big.json"
req POST /v1/jobs -H "$J" --data-binary "@$T/big.json"
expect "270 kB of lyrics" 413 lyrics_too_large "at most 262144 bytes"
job quick '{}' '"lyrics": "la la"'
expect "lyrics for a pipeline without align" 400 bad_request "no align stage"
job open "{\"align\": {\"lyrics\": \"$T/in/words.txt\"}}" '"lyrics": "la la"'
expect "lyrics and align.lyrics together" 400 bad_request "send one of them"

# --- the input is opened once: checked at submit, the job reads that
job wait '{}'; expect "a job that holds the device" 202
cp "$SONG" "$T/in/swap.wav"
req POST /v1/jobs -d "{\"pipeline\": \"quick\", \"input\": \"$T/in/swap.wav\"}"
expect "a job whose input will be swapped" 202
ID=$(field id); D=$(jobdir)
rm "$T/in/swap.wav"; ln -s "$T/out/secret.txt" "$T/in/swap.wav"
cmp -s "$D"/input-swap.wav "$SONG" || fail "the job's copy of its input is not the file checked at submit"
wait_done "$ID"
req GET "/v1/jobs/$ID"
[[ $BODY != *"$T/in/swap.wav\""* ]] || [[ $BODY == *"$D/input-swap.wav"* ]] ||
  fail "the job does not read its own copy: $BODY"
for f in fifo sub hard.txt link.txt; do
  req POST /v1/jobs -d "{\"pipeline\": \"quick\", \"input\": \"$T/in/$f\"}"
  expect "input $f" 400 bad_input
done
req POST /v1/jobs -d "{\"pipeline\": \"quick\", \"input\": \"$T/in/big.wav\"}"
expect "an input over max_upload_mib" 413 input_too_large "more than the 1048576"

# --- session items are held to the same
req POST /v1/sessions -d '{"pipeline": "song"}'; expect "session open" 201
SID=$(field id)
req POST "/v1/sessions/$SID/items" -d "{\"input\": \"$SONG\", \"options\": {\"align\": {\"lyrics\": \"/etc/passwd\"}}}"
expect "a session item setting align.lyrics" 400 bad_request "option align.lyrics is operator-only"
req POST "/v1/sessions/$SID/items" -d "{\"input\": \"$T/in/link.txt\"}"
expect "a session item naming a symlink" 400 bad_input
req POST "/v1/sessions/$SID/items" -d "{\"input\": \"$SONG\", \"lyrics\": \"Hello from the\"}"
expect "a session item with lyrics" 200
ly=$(ls "$T"/data/sessions/"$SID"/*/lyrics.txt 2>/dev/null | head -1)
[ -n "$ly" ] && [ "$(cat "$ly")" = "Hello from the" ] || fail "the session item's lyrics were not stored in its directory"
req DELETE "/v1/sessions/$SID"
grep -q "secret outside" "$T"/data/jobs/*/* 2>/dev/null && fail "a file outside --input-dir was copied into a job"
stop_server || fail "the server did not exit 0 on SIGTERM: $(tail -5 "$T/log")"

# --- a config that allows what no stage has: the pipeline cannot run (said
# at start, and to its jobs), the others can
# (this server also takes at most 1 KiB of lyrics: "max_lyrics_kib": 1)
sed 's/"align.lyrics", /"align.lyrix", /; s/"max_upload_mib": 1}/"max_upload_mib": 1, "max_lyrics_kib": 1}/' \
  "$T/cfg.json" > "$T/bad.json"
grep -q '"max_lyrics_kib": 1}' "$T/bad.json" || fail "the test could not set max_lyrics_kib in $T/bad.json"
serve "$T/bad.log" --config "$T/bad.json" --data-dir "$T/data2" --no-cache --input-dir "$T/in"
# --- max_lyrics_kib 1: 1025 bytes are 413 naming the limit (JSON and a
# multipart part), 1024 bytes pass the cap (then 400: quick has no align)
L1024=$(head -c 1024 /dev/zero | tr '\0' 'a')
job quick '{}' "\"lyrics\": \"${L1024}b\""
expect "1025 bytes of lyrics under max_lyrics_kib 1" 413 lyrics_too_large "at most 1024 bytes"
req POST /v1/jobs -F pipeline=quick -F "lyrics=${L1024}b" -F "file=@$SONG;type=audio/wav"
expect "a 1025-byte multipart lyrics part under max_lyrics_kib 1" 413 lyrics_too_large "at most 1024 bytes"
job quick '{}' "\"lyrics\": \"$L1024\""
expect "1024 bytes of lyrics under max_lyrics_kib 1" 400 bad_request "no align stage"
grep -q "pipeline 'open' cannot run: .*has no option 'lyrix'" "$T/bad.log" ||
  fail "allow_options naming no option is not reported at start: $(cat "$T/bad.log")"
job open '{}'
expect "a job of the pipeline whose allow_options names no option" 400 bad_request "no option 'lyrix'"
job quick '{}'
expect "a job of another pipeline" 202
stop_server
[ "$fails" = 0 ] || { echo "--- server log"; tail -40 "$T/log"; }
exit $((fails > 0))
