#!/usr/bin/env bash
# A Python client written from docs/broker.md alone
# (broker_python_client.py) asks an `ebb serve` on the fake GPU for 2 GiB:
# the server unloads its idle 3 GiB pipeline, answers the bytes, and
# fakegpu-smi shows the server's usage dropped by exactly what it answered.
set -u
: "${EBB_BUILD_DIR:?}" "${EBB_SOURCE_DIR:?}"
. "$(dirname "$0")/../lib/server.sh"
export FAKEGPU_MEMORY_MIB=16384 FAKEGPU_CONTEXT_MIB=300
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {"big": {"stages": [{"stage": "synthetic", "name": "b", "cache": false,
                                   "options": {"weights_mib": 3072, "touch": "sample"}}]}}}
JSON
serve "$T/log" --config "$T/cfg.json" --data-dir "$T/data" --broker-dir "$T/broker"
req POST /v1/pipelines/big/load
[ "$CODE" = 200 ] || fail "load big: $CODE $BODY"
for _ in $(seq 50); do [ -S "$T/broker/$SERVER.sock" ] && break; sleep 0.1; done
before=$(held_by "$SERVER")
python3 "$(dirname "$0")/broker_python_client.py" "$T/broker" $((2 << 30)) > "$T/py.out" 2>&1 ||
  fail "the Python client failed: $(cat "$T/py.out")"
cat "$T/py.out"
given=$(awk -v p="$SERVER" '$1 == "GIVEN" && $2 == p {print $3}' "$T/py.out")
after=$(held_by "$SERVER")
[ -n "$given" ] && [ "$given" -ge $((2 << 30)) ] || fail "the server gave '$given' bytes, asked 2 GiB"
[ -n "$given" ] && [ $(( (before - after) - (given >> 20) )) -eq 0 ] ||
  fail "fakegpu-smi: $before -> $after MiB, the answer said $((given >> 20)) MiB"
wait_log "$T/log" "^\[broker\] pid $SERVER (ebb serve) gave back $((given >> 20)) MiB on cuda:0 in [0-9]* ms: pipeline big unloaded" ||
  fail "no [broker] line for the giving: $(cat "$T/log")"
pid=$SERVER
stop_server || fail "ebb serve exited $? on SIGTERM"
[ -e "$T/broker/$pid.sock" ] && fail "the socket outlived the server"
[ $fails -eq 0 ] && echo "broker_python_client: ok"
exit $((fails > 0))
