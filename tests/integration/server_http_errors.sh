#!/usr/bin/env bash
# Malformed requests get the answer docs/api.md documents, and the
# connection is closed after it (server_http_errors.py): ebb's JSON 400 for
# no Host on HTTP/1.1, Content-Length with Transfer-Encoding and a space
# before a header's colon (RFC 9112); libmicrohttpd's own status for a URI
# or headers too large (414/431), a malformed request or header line (400),
# an HTTP version it does not speak (505), a Content-Length or a chunked
# body it cannot frame (413/400); also on a kept-alive connection.
set -u
: "${EBB_SOURCE_DIR:?}"
. "$(dirname "$0")/../lib/server.sh"
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {"quick": {"stages": [{"stage": "synthetic", "options": {"weights_mib": 1}}]}}}
JSON
serve "$T/log" --config "$T/cfg.json" --data-dir "$T/data" --no-cache
drive "$T/log" timeout 120 python3 "$EBB_SOURCE_DIR/tests/integration/server_http_errors.py" "${URL##*:}"
echo "server_http_errors: all checks passed"
