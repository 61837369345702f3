#!/usr/bin/env bash
# The live page in a real headless chromium (Debian's chromium +
# chromium-driver + python3-selenium, for /usr/bin/python3) while a synthetic
# pipeline runs on a two-device fake GPU (ebb serve --devices cuda:0,cuda:1;
# 'other' pinned to cuda:0, 'demo' to cuda:1): server_page.py checks each
# device's panel (owners and figures as GET /v1/memory has them), release
# labels, job rows, the leak, the buttons, an asleep pipeline (its parked
# bytes shown asleep, not on the device; the sleep/wake marks) and the
# console; the screenshot lands in
# build/artifacts/page.png (EBB_UPDATE_DOCS_IMG=1 also copies it to docs/img/).
set -u
: "${EBB_BUILD_DIR:?}" "${EBB_SOURCE_DIR:?}"
. "$(dirname "$0")/../lib/server.sh"
export FAKEGPU_DEVICES=2 FAKEGPU_MEMORY_MIB=4096,3072 FAKEGPU_CONTEXT_MIB=300
for tool in /usr/bin/chromium /usr/bin/chromedriver; do
  [ -x "$tool" ] || { echo "FAIL: $tool is missing (scripts/install-deps.sh installs chromium chromium-driver)"; exit 1; }
done
/usr/bin/python3 -c 'import selenium' 2>/dev/null ||
  { echo "FAIL: selenium is missing for /usr/bin/python3 (install-deps.sh installs python3-selenium)"; exit 1; }

cat > "$T/cfg.json" <<'JSON'
{"pipelines": {
  "demo": {"description": "two synthetic stages, the second leaks 8 MiB", "devices": ["cuda:1"],
           "stages": [{"stage": "synthetic", "name": "a", "options": {"weights_mib": 256, "activations_mib": 128, "run_ms": 2500}},
                      {"stage": "synthetic", "name": "b", "options": {"weights_mib": 512, "activations_mib": 256, "leak_mib": 8, "run_ms": 2500}}]},
  "other": {"devices": ["cuda:0"], "stages": [{"stage": "synthetic", "name": "o", "options": {"weights_mib": 320}}]}}}
JSON
echo "any input" > "$T/input.txt"
# a second server with tokens (an admin one and a submit one): the page asks
# for a token there
printf 'page-test-admin-token-0123456789 admin\npage-test-submit-token-0123456789 submit\n' > "$T/tokens"
chmod 600 "$T/tokens"
serve "$T/log2" --config "$T/cfg.json" --data-dir "$T/data2" --input-dir "$T" \
  --no-cache --token-file "$T/tokens"
SERVER2=$SERVER URL2=$URL
trap '{ kill -TERM "$SERVER2"; wait "$SERVER2"; stop_server; } >/dev/null 2>&1 || true' EXIT
serve "$T/log" --config "$T/cfg.json" --data-dir "$T/data" --input-dir "$T" --no-cache \
  --devices cuda:0,cuda:1
timeout 240 /usr/bin/python3 "$EBB_SOURCE_DIR/tests/integration/server_page.py" "$URL" "$T" \
  "$EBB_BUILD_DIR/artifacts/page.png" "$URL2" page-test-admin-token-0123456789 \
  page-test-submit-token-0123456789
rc=$?
if [ $rc -ne 0 ]; then
  echo "--- server log"; cat "$T/log"; echo "--- token server log"; cat "$T/log2"; exit 1
fi
echo "server_page: all checks passed"
