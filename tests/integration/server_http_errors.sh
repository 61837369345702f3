#!/usr/bin/env bash
# Every error is JSON, including the answers libmicrohttpd writes itself
# before ebb sees the request (server_http_errors.py): a URI or headers too
# large (414/431), no Host on HTTP/1.1, a malformed request or header line
# (400), an HTTP version it does not speak (505), a Content-Length or a
# chunked body it cannot frame (413/400), also on a kept-alive connection.
set -u
: "${EBB_SOURCE_DIR:?}"
. "$(dirname "$0")/../lib/server.sh"
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {"quick": {"stages": [{"stage": "synthetic", "options": {"weights_mib": 1}}]}}}
JSON
serve "$T/log" --config "$T/cfg.json" --data-dir "$T/data" --no-cache
drive "$T/log" timeout 120 python3 "$EBB_SOURCE_DIR/tests/integration/server_http_errors.py" "${URL##*:}"
echo "server_http_errors: all checks passed"
