#!/usr/bin/env bash
# Every error is JSON, including the answers libmicrohttpd writes itself
# before ebb sees the request (server_http_errors.py): a URI or headers too
# large (414/431), no Host on HTTP/1.1, a malformed request or header line
# (400), an HTTP version it does not speak (505), a Content-Length or a
# chunked body it cannot frame (413/400), also on a kept-alive connection.
set -u
: "${EBB:?}" "${FAKEGPU_STATE:?}" "${EBB_TEST_TMP:?}" "${EBB_SOURCE_DIR:?}"
T=$EBB_TEST_TMP
rm -rf "$T" && mkdir -p "$T"
rm -f "$FAKEGPU_STATE"
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {"quick": {"stages": [{"stage": "synthetic", "options": {"weights_mib": 1}}]}}}
JSON
"$EBB" serve --config "$T/cfg.json" --listen 127.0.0.1:0 --data-dir "$T/data" --no-cache \
  > "$T/log" 2>&1 &
SERVER=$!
trap 'kill -TERM $SERVER 2>/dev/null; wait $SERVER 2>/dev/null' EXIT
for _ in $(seq 100); do
  grep -q '^ebb: listening on http://' "$T/log" 2>/dev/null && break
  sleep 0.1
done
URL=$(head -1 "$T/log" | sed -n 's/^ebb: listening on //p')
[ -n "$URL" ] || { echo "FAIL: no listening line; log:"; cat "$T/log"; exit 1; }
timeout 120 python3 "$EBB_SOURCE_DIR/tests/integration/server_http_errors.py" "${URL##*:}"
rc=$?
kill -TERM $SERVER; wait $SERVER; src=$?
trap - EXIT
[ $src -eq 0 ] || { echo "FAIL: ebb serve exited $src on SIGTERM"; rc=1; }
if [ $rc -ne 0 ]; then
  echo "--- server log"; tail -40 "$T/log"; exit 1
fi
echo "server_http_errors: all checks passed"
