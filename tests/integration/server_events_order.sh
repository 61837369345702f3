#!/usr/bin/env bash
# GET /v1/events is one stream in the order facts were made: marks and the
# allocator's out-of-memory are facts on the event bus, like releases and
# jobs, so a slow publisher tick (EBB_EVENTS_INTERVAL_MS=1000: facts are
# gathered for 100 ms) cannot put stage b's `load` mark before stage a's
# release, nor an out-of-memory after the failure it caused. The server's
# first device allocation fails (FAKEGPU_FAIL_ALLOC_AT=1): the first job
# fails out of device memory, the second runs (server_events_facts.py order).
set -u
: "${EBB_SOURCE_DIR:?}"
. "$(dirname "$0")/../lib/server.sh"
export FAKEGPU_MEMORY_MIB=4096 FAKEGPU_CONTEXT_MIB=300 EBB_EVENTS_INTERVAL_MS=1000
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {
  "demo": {"stages": [{"stage": "synthetic", "name": "a", "options": {"weights_mib": 64}},
                      {"stage": "synthetic", "name": "b", "options": {"weights_mib": 128, "run_ms": 300}}]}}}
JSON
echo "any input" > "$T/input.txt"
FAKEGPU_FAIL_ALLOC_AT=1 serve "$T/log" --config "$T/cfg.json" --data-dir "$T/data" \
  --input-dir "$T" --no-cache
drive "$T/log" timeout 60 python3 "$EBB_SOURCE_DIR/tests/integration/server_events_facts.py" \
  order "$URL" "$T/input.txt"
[ $fails -eq 0 ] && echo "server_events_order: all checks passed"
exit $((fails > 0))
