#!/usr/bin/env bash
# A loaded pipeline with an isolated stage ("isolate": true: the stage runs in
# an ebb-worker process): the worker is started by the load and must survive
# the HTTP connection that asked for it (workers die with the thread that
# started them), so items in later connections run on it without a reload;
# while loaded, the memory is the worker's, not the server's; unload ends the
# worker and fakegpu-smi then lists neither.
set -u
. "$(dirname "$0")/../lib/server.sh"
export FAKEGPU_MEMORY_MIB=4096 FAKEGPU_CONTEXT_MIB=300
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {"iso": {"stages": [{"stage": "synthetic", "name": "w", "isolate": true, "cache": false,
                                   "options": {"weights_mib": 256}}]}}}
JSON
echo "any input" > "$T/input.txt"
serve "$T/log" --config "$T/cfg.json" --data-dir "$T/data" --input-dir "$T"

req POST /v1/sessions -d '{"pipeline": "iso"}'
[ "$CODE" = 201 ] || fail "session on iso: $CODE $BODY"
S=$(jget "$BODY" '["id"]')
sleep 0.3 # a worker killed with its connection's thread would be gone by now
others=$(apps | awk -F', *' -v p="$SERVER" '$1 != p {n++; s += $2} END {print n + 0, s + 0}')
set -- $others
[ "$1" = 1 ] && [ "$2" -ge 256 ] || fail "expected one worker holding the stage, fakegpu-smi: $(apps)"
worker=$(apps | awk -F', *' -v p="$SERVER" '$1 != p {print $1}')
for i in 1 2; do
  req POST "/v1/sessions/$S/items" -d "{\"input\": \"$T/input.txt\"}"
  [ "$CODE" = 200 ] || fail "item $i on the isolated pipeline: $CODE $BODY"
done
now=$(apps | awk -F', *' -v p="$SERVER" '$1 != p {print $1}')
[ "$now" = "$worker" ] || fail "the worker changed between items ($worker -> $now): it was reloaded"
req POST /v1/pipelines/iso/unload
[ "$CODE" = 200 ] || fail "unload: $CODE $BODY"
[ -z "$(apps)" ] || fail "after unload fakegpu-smi still lists: $(apps)"
kill -0 "$worker" 2>/dev/null && fail "worker $worker still running after unload"
stop_server; rc=$?
[ "$rc" = 0 ] || fail "ebb serve exited $rc on SIGTERM"
if [ "$fails" -ne 0 ]; then echo "--- server log"; cat "$T/log"; exit 1; fi
echo "server_isolated: all checks passed"
