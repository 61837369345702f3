#!/usr/bin/env bash
# GET /v1/events on the fake GPU (server_events.py): hello, a job's events
# matching GET /v1/jobs/ID, a slow reader dropped while others go on, the
# client cap. Small buffers and a fast interval make the bounds show quickly.
# Then on two fake devices (server_events_devices.py): per-device events
# matching /v1/memory per device, releases, the leak, asleep and woke.
set -u
: "${EBB_SOURCE_DIR:?}"
. "$(dirname "$0")/../lib/server.sh"
export FAKEGPU_MEMORY_MIB=4096 FAKEGPU_CONTEXT_MIB=300
export EBB_EVENTS_INTERVAL_MS=10 EBB_EVENTS_CLIENT_BUFFER=8192 EBB_EVENTS_MAX_CLIENTS=4
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {
  "demo": {"stages": [{"stage": "synthetic", "name": "a", "options": {"weights_mib": 64, "activations_mib": 32, "run_ms": 300}},
                      {"stage": "synthetic", "name": "b", "options": {"weights_mib": 128, "activations_mib": 64, "leak_mib": 4, "run_ms": 300}}]}}}
JSON
echo "any input" > "$T/input.txt"
serve "$T/log" --config "$T/cfg.json" --data-dir "$T/data" --input-dir "$T" --no-cache
drive "$T/log" timeout 200 python3 "$EBB_SOURCE_DIR/tests/integration/server_events.py" "$URL" "$T/input.txt"

# two devices (server_events_devices.py): every per-device event names its
# device and matches that device in /v1/memory; asleep owners
rm -f "$FAKEGPU_STATE"
export FAKEGPU_DEVICES=2 FAKEGPU_MEMORY_MIB=4096,3072
export EBB_EVENTS_INTERVAL_MS=50 EBB_EVENTS_CLIENT_BUFFER=1048576 EBB_EVENTS_MAX_CLIENTS=8
cat > "$T/cfg2.json" <<'JSON'
{"pipelines": {
  "other": {"devices": ["cuda:1"], "stages": [{"stage": "synthetic", "name": "o", "options": {"weights_mib": 96}}]},
  "demo": {"devices": ["cuda:0"],
           "stages": [{"stage": "synthetic", "name": "a", "options": {"weights_mib": 64, "activations_mib": 32, "run_ms": 300}},
                      {"stage": "synthetic", "name": "b", "options": {"weights_mib": 128, "activations_mib": 64, "leak_mib": 4, "run_ms": 300}}]}}}
JSON
serve "$T/log2" --config "$T/cfg2.json" --data-dir "$T/data2" --input-dir "$T" --no-cache \
  --devices cuda:0,cuda:1
drive "$T/log2" timeout 200 python3 "$EBB_SOURCE_DIR/tests/integration/server_events_devices.py" \
  "$URL" "$T/input.txt"
echo "server_events: all checks passed"
