#!/usr/bin/env bash
# POST /v1/memory/reclaim and the ebb_broker_* metrics (issue 35): server X
# (admin token) asks for the free memory + 3000 MiB on cuda:0; server A
# unloads its idle 3 GiB pipeline; the answer names A with the bytes it gave,
# "satisfied": true. A bad body is a 400 naming what was wrong, a submit
# token a 403, a device that is not cuda:N a 400, an absent cuda:7 a 404. /metrics: X counts one ask
# and the bytes received, A the request answered and the bytes given.
set -u
: "${EBB_BUILD_DIR:?}" "${EBB:?}"
. "$(dirname "$0")/../lib/broker.sh"
export FAKEGPU_MEMORY_MIB=8192 FAKEGPU_CONTEXT_MIB=300
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {"idle": {"stages": [{"stage": "synthetic", "name": "i", "cache": false,
                                    "options": {"weights_mib": 3072, "touch": "sample"}}]}}}
JSON
printf 'adm1n-0123456789abcdef admin\nsubm1t-0123456789abcdef submit\n' > "$T/tokens"
chmod 600 "$T/tokens"
start() { broker_serve "$1" "$T/cfg.json" --token-file "$T/tokens" --broker-timeout 60; }
call() { # TOKEN URL PATH [BODY|-]: CODE, BODY (a BODY or - is a POST)
  local out args=(-X GET)
  [ -n "${4:-}" ] && args=(-X POST)
  [ -n "${4:-}" ] && [ "$4" != - ] && args+=(-H 'Content-Type: application/json' -d "$4")
  out=$(curl -s -w '\n%{http_code}' "${args[@]}" -H "Authorization: Bearer $1" "$2$3")
  CODE=${out##*$'\n'}; BODY=${out%$'\n'*}
}
start A; A=$PID; UA=$URL
call adm1n-0123456789abcdef "$UA" /v1/pipelines/idle/load -
[ "$CODE" = 200 ] || fail "load on A: $CODE $BODY"
start X; UX=$URL
free=$("$FAKEGPU_SMI" --query-gpu=memory.free --format=csv,noheader,nounits | head -1)
want=$(( (free + 3000) << 20 ))

call adm1n-0123456789abcdef "$UX" /v1/memory/reclaim '{"device": "cuda:0", "bytes": 5, "extra": 1}'
[ "$CODE" = 400 ] && [[ $BODY == *'unknown key \"extra\"'* ]] || fail "an unknown key: $CODE $BODY"
call adm1n-0123456789abcdef "$UX" /v1/memory/reclaim '{"device": "gpu0", "bytes": 5}'
[ "$CODE" = 400 ] && [[ $BODY == *"gpu0"* ]] || fail "device gpu0: $CODE $BODY"
call adm1n-0123456789abcdef "$UX" /v1/memory/reclaim '{"device": "cuda:7", "bytes": 5}'
[ "$CODE" = 404 ] && [[ $BODY == *'cuda:7: no such device'* ]] || fail "device cuda:7 (absent): $CODE $BODY"
call adm1n-0123456789abcdef "$UX" /v1/memory/reclaim '{"device": "cuda:0", "bytes": -1}'
[ "$CODE" = 400 ] || fail "bytes -1: $CODE $BODY"
call subm1t-0123456789abcdef "$UX" /v1/memory/reclaim "{\"device\": \"cuda:0\", \"bytes\": $want}"
[ "$CODE" = 403 ] || fail "a submit token: $CODE $BODY (expected 403: admin only)"

call adm1n-0123456789abcdef "$UX" /v1/memory/reclaim "{\"device\": \"cuda:0\", \"bytes\": $want}"
[ "$CODE" = 200 ] || fail "reclaim: $CODE $BODY"
echo "$BODY"
[ "$(jget "$BODY" '["satisfied"]')" = True ] || fail "not satisfied: $BODY"
[ "$(jget "$BODY" '["peers"][0]["pid"]')" = "$A" ] || fail "A is not the first peer: $BODY"
given=$(jget "$BODY" '["peers"][0]["given_bytes"]')
[ "$given" = $((3372 << 20)) ] || fail "A gave $given bytes, expected 3372 MiB (pipeline + context)"
[ "$(jget "$BODY" '["free_bytes"]')" -ge "$want" ] || fail "free after: $BODY"
[ "$(held_by "$A")" = 0 ] || fail "A still holds $(held_by "$A") MiB"

call adm1n-0123456789abcdef "$UX" /metrics
grep -q '^ebb_broker_asks_total 1$' <<< "$BODY" || fail "X's metrics: $(grep broker <<< "$BODY")"
grep -q "^ebb_broker_received_bytes_total $given\$" <<< "$BODY" || fail "X's received bytes: $(grep broker <<< "$BODY")"
grep -q '^ebb_broker_registered 1$' <<< "$BODY" || fail "X not registered in metrics"
call adm1n-0123456789abcdef "$UA" /metrics
grep -q "^ebb_broker_given_bytes_total $given\$" <<< "$BODY" || fail "A's given bytes: $(grep broker <<< "$BODY")"
grep -q '^ebb_broker_requests_answered_total 2$' <<< "$BODY" || fail "A's answered (info + reclaim): $(grep broker <<< "$BODY")"
if command -v promtool > /dev/null; then
  promtool check metrics <<< "$BODY" > "$T/prom.out" 2>&1
  if grep -q "ebb_broker" "$T/prom.out"; then fail "promtool on the broker families: $(grep ebb_broker "$T/prom.out")"; fi
fi
for p in "${PIDS[@]}"; do kill -TERM "$p"; wait "$p" || fail "a server exited $? on SIGTERM"; done
PIDS=()
[ $fails -eq 0 ] && echo "broker_api: ok"
exit $((fails > 0))
