#!/usr/bin/env bash
# With --queue (docs/api.md, "What a job may carry"): a job that sets an
# operator-only option is refused at the front door (400 naming it), and a
# Redis entry written by anyone else that carries one is not run: its job
# fails naming the option (the entry's options are a job's, not the
# operator's). Lyrics sent with a job and the file of a path option a job
# may set ("allow_options") are checked at the front door as a local job's
# (the align stage, the caps, --input-dir), read there once and travel as
# bytes in Redis: the file swapped right after the 202 is not what the job
# reads, and the options in Redis name no path. The running node checks
# them again: a hand-written entry whose lyrics exceed its cap, or that
# sends a file for an option its config does not let a job set, fails
# naming why and is dead-lettered.
set -u
: "${EBB:?}"
. "$(dirname "$0")/../lib/cluster.sh"
export FAKEGPU_MEMORY_MIB=4096 FAKEGPU_CONTEXT_MIB=300
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {"dec": {"stages": [{"stage": "decode"}]},
  "ly": {"allow_options": ["align.lyrics"],
    "stages": [{"stage": "decode"}, {"stage": "separate"}, {"stage": "align"},
      {"stage": "export", "options": {"formats": "lrc", "stems": "none"}}]}},
 "server": {"max_lyrics_kib": 1}}
JSON
mkdir -p "$T/in"
printf 'Hello from the\nwhisper test server\n' > "$T/in/words.txt"
"$EBB_BUILD_DIR/songgen" --seed 2 --seconds 6 "$T" song > /dev/null || { fail "songgen failed"; exit 1; }
start_redis
FAKEGPU_STATE="$T/gpu" "$EBB" serve --config "$T/cfg.json" --listen 127.0.0.1:0 --data-dir "$T/data" \
  --input-dir "$T" --no-cache --queue "redis://127.0.0.1:$PORT/0" --queue-prefix t --node-id n1 \
  > "$T/log-n1" 2>&1 &
NPID[n1]=$!
node_up n1
post() {
  BODY=$(curl -s -w '\n%{http_code}' -X POST "${URL[n1]}/v1/jobs" -H 'Content-Type: application/json' -d "$1")
  CODE=${BODY##*$'\n'}; BODY=${BODY%$'\n'*}
}
post "{\"pipeline\": \"dec\", \"input\": \"$T/song.wav\", \"options\": {\"decode\": {\"max_seconds\": 86400}}}"
[ "$CODE" = 400 ] && [[ $BODY == *"option decode.max_seconds is operator-only"* ]] ||
  fail "--queue: a job setting decode.max_seconds: $CODE $BODY"
post "{\"pipeline\": \"dec\", \"input\": \"$T/song.wav\", \"lyrics\": \"la\"}"
[ "$CODE" = 400 ] && [[ $BODY == *"no align stage"* ]] ||
  fail "--queue: lyrics for a pipeline without align: $CODE $BODY"
post "{\"pipeline\": \"dec\", \"input\": \"$T/song.wav\", \"options\": {\"decode\": {\"rate\": 8000}}}"
[ "$CODE" = 202 ] || fail "--queue: a job with job-settable options: $CODE $BODY"
# an entry written straight into Redis, as another client of the queue could
UID_=0123456789abcdef0123456789abcdef
rcli SET "t:input:$UID_" "$(head -c 64 "$T/song.wav" | base64)" > /dev/null
rcli HSET "t:job:$UID_" pipeline dec owner "" options '{"decode": {"max_seconds": 86400}}' \
  input_kind redis input_ref "t:input:$UID_" input_name x.wav state queued attempt 0 \
  created "$(date +%s)" submitted_on other > /dev/null
rcli XADD t:stream:dec '*' uid "$UID_" > /dev/null
state= msg=
for _ in $(seq 100); do
  BODY=$(curl -s "${URL[n1]}/v1/jobs/$UID_")
  state=$(sed -n 's/.*"state":"\([a-z]*\)".*/\1/p' <<< "$BODY")
  case $state in failed|succeeded) break ;; esac
  sleep 0.1
done
[ "$state" = failed ] && [[ $BODY == *"option decode.max_seconds is operator-only"* ]] ||
  fail "a Redis entry carrying an operator-only option: state '$state': $BODY"

# wait_end ID: polls (100 ms apart, 60 s at most) until the job ended; sets state, BODY
wait_end() {
  state=
  for _ in $(seq 600); do
    BODY=$(curl -s "${URL[n1]}/v1/jobs/$1")
    state=$(sed -n 's/.*"state":"\([a-z]*\)".*/\1/p' <<< "$BODY")
    case $state in failed|succeeded|cancelled) return 0 ;; esac
    sleep 0.1
  done
}
lrc_of() { curl -s "${URL[n1]}/v1/jobs/$1/files/lyrics.lrc"; }

# --- a path option a job may set: read once at submit, its bytes in Redis
post "{\"pipeline\": \"ly\", \"input\": \"$T/song.wav\", \"options\": {\"align\": {\"lyrics\": \"$T/in/words.txt\"}}}"
[ "$CODE" = 202 ] || fail "--queue: a job setting the allowed align.lyrics: $CODE $BODY"
ID=$(sed -n 's/.*"id":"\([0-9a-f]*\)".*/\1/p' <<< "$BODY")
printf 'SWAPPED\n' > "$T/in/words.txt" # after the 202: the job must not read this
[ "$(rcli HGET "t:extras:$ID" opt:align.lyrics)" = $'Hello from the\nwhisper test server' ] ||
  fail "the option's file is not in Redis as t:extras:$ID opt:align.lyrics: '$(rcli HGETALL "t:extras:$ID")'"
[[ $(rcli HGET "t:job:$ID" options) != *"$T/in"* ]] ||
  fail "the job's options in Redis still name the submitting node's path: $(rcli HGET "t:job:$ID" options)"
wait_end "$ID"
[ "$state" = succeeded ] || fail "the job with an allowed lyrics file ended '$state': $BODY"
lrc=$(lrc_of "$ID")
[[ $lrc == *"Hello from the"* && $lrc == *"whisper test server"* && $lrc != *SWAPPED* ]] ||
  fail "lyrics.lrc does not hold the file as it was at submit: '$lrc'"
# the same confinement as a local job's
post "{\"pipeline\": \"ly\", \"input\": \"$T/song.wav\", \"options\": {\"align\": {\"lyrics\": \"/etc/passwd\"}}}"
[ "$CODE" = 400 ] && [[ $BODY == *"option align.lyrics"* ]] ||
  fail "--queue: align.lyrics outside --input-dir: $CODE $BODY"

# --- lyrics with the job: JSON and multipart, through Redis, under the cap
post "{\"pipeline\": \"ly\", \"input\": \"$T/song.wav\", \"lyrics\": \"la la land\\nsecond line\"}"
[ "$CODE" = 202 ] || fail "--queue: a job with JSON lyrics: $CODE $BODY"
ID=$(sed -n 's/.*"id":"\([0-9a-f]*\)".*/\1/p' <<< "$BODY")
wait_end "$ID"
lrc=$(lrc_of "$ID")
[ "$state" = succeeded ] && [[ $lrc == *"la la land"* && $lrc == *"second line"* ]] ||
  fail "the job with JSON lyrics ended '$state', lyrics.lrc '$lrc': $BODY"
BODY=$(curl -s -w '\n%{http_code}' -X POST "${URL[n1]}/v1/jobs" -F pipeline=ly \
  -F "lyrics=multipart words" -F "file=@$T/song.wav;type=audio/wav")
CODE=${BODY##*$'\n'}; BODY=${BODY%$'\n'*}
[ "$CODE" = 202 ] || fail "--queue: an upload with a lyrics part: $CODE $BODY"
ID=$(sed -n 's/.*"id":"\([0-9a-f]*\)".*/\1/p' <<< "$BODY")
wait_end "$ID"
[ "$state" = succeeded ] && [[ $(lrc_of "$ID") == *"multipart words"* ]] ||
  fail "the upload with a lyrics part ended '$state', lyrics.lrc '$(lrc_of "$ID")'"
L1025=$(head -c 1025 /dev/zero | tr '\0' 'a')
post "{\"pipeline\": \"ly\", \"input\": \"$T/song.wav\", \"lyrics\": \"$L1025\"}"
[ "$CODE" = 413 ] && [[ $BODY == *lyrics_too_large* ]] || fail "--queue: 1025 bytes of lyrics: $CODE $BODY"

# --- entries nobody vouches for: the running node checks the extras again
hostile() { # UID PIPELINE FIELD VALUE: a queued job whose extras carry FIELD
  rcli SET "t:input:$1" "$(head -c 64 "$T/song.wav" | base64)" > /dev/null
  rcli HSET "t:extras:$1" "$3" "$4" > /dev/null
  rcli HSET "t:job:$1" pipeline "$2" owner "" options '' extras "[\"$3\"]" \
    input_kind redis input_ref "t:input:$1" input_name x.wav state queued attempt 0 \
    created "$(date +%s)" submitted_on other > /dev/null
  rcli XADD "t:stream:$2" '*' uid "$1" > /dev/null
}
U1=1123456789abcdef0123456789abcdef U2=2123456789abcdef0123456789abcdef
hostile "$U1" ly lyrics "$(head -c 2048 /dev/zero | tr '\0' 'b')"
hostile "$U2" dec opt:decode.max_seconds "86400"
wait_end "$U1"
[ "$state" = failed ] && [[ $BODY == *"more than the 1024 this node takes"* ]] ||
  fail "an entry with lyrics over the node's cap: state '$state': $BODY"
wait_end "$U2"
[ "$state" = failed ] && [[ $BODY == *"decode.max_seconds"* ]] ||
  fail "an entry sending a file for an option no job may set: state '$state': $BODY"
dl=$(rcli XRANGE t:deadletter - +)
[[ $dl == *"$U1"* && $dl == *"$U2"* ]] || fail "the bad entries are not in t:deadletter: $dl"
exit $((fails > 0))
