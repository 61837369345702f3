#!/usr/bin/env bash
# GET /v1/events honours Last-Event-ID (docs/api.md): every event carries an
# `id:`; a client that goes away while a job runs and comes back with the
# last id it saw gets every event it missed (the job's queued .. succeeded,
# its releases and its leak), ids one after the other, no hello. A server
# with a small buffer (EBB_EVENTS_BUFFER=16 events) has forgotten an id a few
# samples later: that client, and one sending an unreadable id or one this
# server never gave, gets a fresh hello.
set -u
: "${EBB_SOURCE_DIR:?}"
. "$(dirname "$0")/../lib/server.sh"
export FAKEGPU_MEMORY_MIB=4096 FAKEGPU_CONTEXT_MIB=300 EBB_EVENTS_INTERVAL_MS=100
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {
  "demo": {"stages": [{"stage": "synthetic", "name": "a", "options": {"weights_mib": 64}},
                      {"stage": "synthetic", "name": "b", "options": {"weights_mib": 32, "leak_mib": 2}}]}}}
JSON
echo "any input" > "$T/input.txt"
PY=$EBB_SOURCE_DIR/tests/integration/server_events_facts.py
serve "$T/log" --config "$T/cfg.json" --data-dir "$T/data" --input-dir "$T" --no-cache
drive "$T/log" timeout 60 python3 "$PY" resume "$URL" "$T/input.txt"

rm -f "$FAKEGPU_STATE"
EBB_EVENTS_BUFFER=16 EBB_EVENTS_INTERVAL_MS=20 \
  serve "$T/log2" --config "$T/cfg.json" --data-dir "$T/data2" --input-dir "$T" --no-cache
drive "$T/log2" timeout 60 python3 "$PY" expired "$URL"
[ $fails -eq 0 ] && echo "server_events_resume: all checks passed"
exit $((fails > 0))
