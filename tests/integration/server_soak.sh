#!/usr/bin/env bash
# The bounded soak (issue 9): 1100 idle sockets + 300 slow-loris sockets
# (more than FD_SETSIZE descriptors at once) + 6 concurrent requests with a
# 64 MiB multipart "options" field + 200 queued jobs. While all of that is
# held /healthz answers within 50 ms, the big fields are refused (413) and
# the server's RSS stays bounded; then every job succeeds and the fake GPU
# ends at 0 bytes.
set -u
. "$(dirname "$0")/../lib/server.sh"
SOAK="$(cd "$(dirname "$0")/../support" && pwd)/soak.py"
export FAKEGPU_MEMORY_MIB=4096 FAKEGPU_CONTEXT_MIB=300
JOBS=${EBB_SOAK_JOBS:-200}
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {"tiny": {"release": "after-job", "stages": [{"stage": "synthetic", "name": "t",
   "options": {"weights_mib": 2, "activations_mib": 2, "touch": "sample"}}]}},
 "server": {"header_timeout_s": 120, "max_connections": 2000, "max_connections_per_ip": 64}}
JSON
echo "soak input" > "$T/input.txt"
ulimit -n 8192 2>/dev/null || ulimit -n "$(ulimit -Hn)"
serve "$T/log" --config "$T/cfg.json" --data-dir "$T/data" --no-cache
python3 "$SOAK" "${URL##*:}" "$SERVER" "$JOBS" "$T/input.txt" > "$T/out" 2>&1
cat "$T/out"
get() { sed -n "s/^$1=//p" "$T/out"; }
grep -q '^error=' "$T/out" && fail "$(get error)"
[ "$(get jobs_accepted)" = "$JOBS" ] || fail "$(get jobs_accepted) of $JOBS jobs accepted"
[ "$(get idle_still_open)" = 1100 ] || fail "only $(get idle_still_open) of 1100 idle sockets were held (the test wants them all open)"
big=$(get big_fields)
[ "$big" = "$(printf 'HTTP/1.1 413 Content Too Large;%.0s' 1 2 3 4 5 6 | sed 's/;$//')" ] ||
  [ "$(echo "$big" | tr ';' '\n' | grep -c ' 413 ')" = 6 ] || fail "64 MiB option fields: $big"
w=$(get healthz_worst_ms)
LIMIT=$((50 * ${EBB_TEST_SLOWDOWN:-1})) # ms (sanitizer builds: x4)
python3 -c "import sys; sys.exit(0 if float('${w:-999}') <= $LIMIT else 1)" || fail "/healthz took ${w} ms (limit $LIMIT)"
[ "$(get healthz_failed)" = 0 ] || fail "/healthz failed $(get healthz_failed) of 20 times"
rss=$(get rss_mib_loaded)
[ "${rss:-9999}" -le 512 ] || fail "server RSS ${rss} MiB while loaded (limit 512)"
[ "$(get jobs_left)" = 0 ] || fail "$(get jobs_left) jobs did not succeed"
grep -q '^job_failed=' "$T/out" && fail "jobs failed: $(grep '^job_failed=' "$T/out" | head -3)"
stop_server; rc=$?
[ "$rc" = 0 ] || fail "ebb serve exited $rc on SIGTERM"
used=$("$FAKEGPU_SMI" --query-gpu=memory.used --format=csv,noheader,nounits)
[ "$used" = 0 ] || fail "the fake GPU holds $used MiB after the soak"
if [ "$fails" -ne 0 ]; then echo "--- server log"; tail -30 "$T/log"; exit 1; fi
echo "server_soak: all checks passed"
