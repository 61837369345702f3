#!/usr/bin/env bash
# With --queue (docs/api.md, "What a job may carry"): a job that sets an
# operator-only option is refused at the front door (400 naming it), and a
# Redis entry written by anyone else that carries one is not run: its job
# fails naming the option (the entry's options are a job's, not the
# operator's); lyrics with a job are refused (400) until they can travel.
set -u
: "${EBB:?}"
. "$(dirname "$0")/../lib/cluster.sh"
export FAKEGPU_MEMORY_MIB=4096 FAKEGPU_CONTEXT_MIB=300
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {"dec": {"stages": [{"stage": "decode"}]}}}
JSON
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
[ "$CODE" = 400 ] && [[ $BODY == *"lyrics"* ]] || fail "--queue: lyrics with a job: $CODE $BODY"
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
exit $((fails > 0))
