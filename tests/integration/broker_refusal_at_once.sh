#!/usr/bin/env bash
# A REQUEST NO PEER CAN GIVE FAILS AT ONCE (issue 35, docs/broker.md
# "Timeouts and failures"): one fake 8 GiB device; a server holds "keep"
# ("evictable": false) and "small" under --reserve 2500 MiB. Asked for more
# than the free memory plus all it could give, `ebb reclaim --wait 20`
# does not wait for the driver (the peers' answers are the driver's figures
# already): it exits 1 within a few seconds, naming what the peer keeps and
# why; POST /v1/memory/reclaim of another server answers the same at once.
set -u
: "${EBB_BUILD_DIR:?}" "${EBB:?}"
. "$(dirname "$0")/../lib/broker.sh"
export FAKEGPU_MEMORY_MIB=8192 FAKEGPU_CONTEXT_MIB=300
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {
  "keep": {"evictable": false, "stages": [{"stage": "synthetic", "name": "k", "cache": false,
                     "options": {"weights_mib": 2048, "touch": "sample"}}]},
  "small": {"stages": [{"stage": "synthetic", "name": "s", "cache": false,
                     "options": {"weights_mib": 256, "touch": "sample"}}]}}}
JSON
start() { broker_serve "$1" "$T/cfg.json" "${@:2}"; } # NAME [flags...]
start A --reserve 2500
for p in keep small; do
  c=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$URL_A/v1/pipelines/$p/load")
  [ "$c" = 200 ] || fail "load $p: $c"
done
t0=$(date +%s.%N)
"$EBB" reclaim --device cuda:0 --bytes 7G --broker-dir "$BD" --broker-timeout 5 --wait 20 > "$T/r.out" 2>&1
rc=$? took=$(echo "$(date +%s.%N) - $t0" | bc)
cat "$T/r.out"
echo "--- refused in $took s (--wait 20)"
[ $rc = 1 ] || fail "reclaim of 7 GiB exited $rc, expected 1"
[ "$(echo "$took < 5" | bc)" = 1 ] || fail "a request no peer can give took $took s: it waited for the driver"
expect() { grep -qF -- "$2" "$1" || fail "$(basename "$1") does not say: $2"; }
expect "$T/r.out" "pid $PID_A keeps pipeline keep (2348 MiB): \"evictable\": false in its config"
expect "$T/r.out" "pid $PID_A keeps pipeline small (256 MiB): --reserve 2500 MiB"
expect "$T/r.out" "pid $PID_A keeps context (300 MiB): kept while pipelines are loaded"
expect "$T/r.out" "MiB still missing"

# the same through another server's POST /v1/memory/reclaim
start B
t0=$(date +%s.%N)
ans=$(curl -s -X POST "$URL_B/v1/memory/reclaim" -H 'Content-Type: application/json' \
  -d '{"device": "cuda:0", "bytes": 7516192768}')
took=$(echo "$(date +%s.%N) - $t0" | bc)
echo "$ans" > "$T/api.out"
echo "--- POST /v1/memory/reclaim refused in $took s: $ans"
[ "$(jget "$ans" '["satisfied"]')" = False ] || fail "the API says satisfied: $ans"
[ "$(echo "$took < 10" | bc)" = 1 ] || fail "POST /v1/memory/reclaim took $took s (its wait is 5 s): it waited"
expect "$T/api.out" '"why":"\"evictable\": false in its config"'
expect "$T/api.out" '--reserve 2500 MiB'

kill -TERM "$PID_A" "$PID_B"; wait "$PID_A" "$PID_B" || fail "a server exited $? on SIGTERM"
[ $fails -eq 0 ] && echo "broker_refusal_at_once: ok"
exit $((fails > 0))
