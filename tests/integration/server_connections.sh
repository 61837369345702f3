#!/usr/bin/env bash
# Connections that cannot starve the server (issue 31; docs/api.md,
# "Connections"): over max_connections the oldest connection that has not
# sent a whole request is evicted (idle ones before one still sending its
# body; one being answered never); over max_connections_per_ip an address
# evicts its own oldest, so one local process does not lock 127.0.0.1's
# other clients out; under pressure an idle kept-alive connection is closed
# after idle_pressure (2 s) while /healthz keeps answering; and a short run
# of bench/healthz_soak (1,000 reconnecting sockets from 19 loopback
# addresses, default limits) has no failed probe. /metrics counts the
# connections closed by why.
set -u
. "$(dirname "$0")/../lib/server.sh"
: "${EBB_BUILD_DIR:?}"
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {"quick": {"stages": [{"stage": "synthetic", "options": {"weights_mib": 1}}]}},
 "server": {"max_connections": 64, "max_connections_per_ip": 16, "header_timeout_s": 30,
            "idle_timeout_s": 60}}
JSON
serve "$T/log" --config "$T/cfg.json" --data-dir "$T/data" --no-cache
PORT=${URL##*:}

timeout 90 python3 - "$PORT" "$(cd "$(dirname "$0")/../support" && pwd)" > "$T/out" 2>&1 <<'PY'
import socket, sys, time
port = int(sys.argv[1])

sys.path.insert(0, sys.argv[2])
from rawhttp import closed, conn as raw_conn

def conn(src):
    return raw_conn(port, src, timeout=5)

def healthz(src="127.0.0.1", s=None, close=True):
    """(ms, ok, socket): one GET /healthz, on s or a fresh connection."""
    t0 = time.time(); s = s or conn(src); s.settimeout(5)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" +
              (b"Connection: close\r\n" if close else b"") + b"\r\n")
    data = b""
    try:
        while b'"ok"' not in data:
            b = s.recv(4096)
            if not b: break
            data += b
    except OSError:
        pass
    return (time.time() - t0) * 1000, data.startswith(b"HTTP/1.1 200"), s

def settle(): time.sleep(0.3)

# 1. the oldest idle connection goes first: 64 idle from 8 addresses (under
# the per-address cap), then a 65th: only the first is closed
crowd = [conn("127.0.0.%d" % (2 + i % 8)) for i in range(64)]
settle()
print("before_open", sum(not closed(k) for k in crowd))
extra = conn("127.0.0.10"); settle()
print("oldest_closed", closed(crowd[0], 0.5))
print("second_open", not closed(crowd[1]))
print("newcomer_open", not closed(extra))
ms, ok, _ = healthz()
print("healthz_full", "%.1f %s" % (ms, ok))
print("second_closed", closed(crowd[1], 0.5))
print("third_open", not closed(crowd[2]))
for k in crowd + [extra]: k.close()
time.sleep(0.5)

# 2. a connection sending its body outlives younger idle ones
body = conn("127.0.0.11")
body.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
             b"Content-Length: 100000\r\n\r\n{")
settle()
crowd = [conn("127.0.0.%d" % (2 + i % 8)) for i in range(63)]
settle()
newer = conn("127.0.0.10"); settle()
print("body_open", not closed(body))
print("idle_oldest_closed", closed(crowd[0], 0.5))
for k in crowd + [body, newer]: k.close()
time.sleep(0.5)

# 3. one process holding 127.0.0.1's share does not lock out its other clients
hog = [conn("127.0.0.1") for _ in range(40)]
settle()
print("hog_open", sum(not closed(k) for k in hog))
ms, ok, _ = healthz("127.0.0.1")
print("healthz_beside_hog", "%.1f %s" % (ms, ok))
print("hog_oldest_closed", closed(hog[0], 0.5))
for k in hog: k.close()
time.sleep(0.5)

# 4. under pressure (48 of 64) an idle kept-alive connection is closed after ~2 s
ms, ok, ka = healthz(close=False)
print("keepalive_answered", ok)
crowd = [conn("127.0.0.%d" % (2 + i % 8)) for i in range(50)]
t0 = time.time(); shut = None
while time.time() - t0 < 8:
    if closed(ka, 0.2): shut = time.time() - t0; break
print("keepalive_closed", "%.1f" % shut if shut is not None else "no")
print("fresh_idle_open", sum(not closed(k) for k in crowd))
for k in crowd: k.close()
PY
cat "$T/out"
get() { sed -n "s/^$1 //p" "$T/out"; }
[ "$(get before_open)" = 64 ] || fail "64 idle connections under max_connections 64: $(get before_open) open"
[ "$(get oldest_closed)" = True ] || fail "the 65th connection did not evict the oldest idle one"
[ "$(get second_open)" = True ] || fail "the 65th connection evicted more than the oldest"
[ "$(get newcomer_open)" = True ] || fail "the newcomer over max_connections was closed instead of the oldest"
case $(get healthz_full) in *True) ;; *) fail "/healthz with 64 idle connections held: $(get healthz_full)" ;; esac
[ "$(get second_closed)" = True ] || fail "/healthz over the cap did not evict the next oldest idle connection"
[ "$(get third_open)" = True ] || fail "/healthz over the cap evicted more than the next oldest"
[ "$(get body_open)" = True ] || fail "a connection sending its body was evicted before younger idle ones"
[ "$(get idle_oldest_closed)" = True ] || fail "the oldest idle connection was not the one evicted"
[ "$(get hog_open)" = 16 ] || fail "max_connections_per_ip 16: $(get hog_open) of 40 sockets from 127.0.0.1 open"
case $(get healthz_beside_hog) in *True) ;; *) fail "127.0.0.1 locked out by one process's 16 idle sockets: $(get healthz_beside_hog)" ;; esac
[ "$(get hog_oldest_closed)" = True ] || fail "127.0.0.1's newcomer did not evict that address's oldest idle socket"
[ "$(get keepalive_answered)" = True ] || fail "the kept-alive /healthz was not answered"
case $(get keepalive_closed) in [1234].*) ;; *) fail "an idle kept-alive connection under pressure was closed after $(get keepalive_closed) s (expected ~2)" ;; esac
[ "$(get fresh_idle_open)" = 50 ] || fail "fresh idle connections under the header timeout were closed: $(get fresh_idle_open) of 50 open"
curl -s -m 5 "$URL/healthz" | grep -q ok || fail "the server stopped answering"
m=$(curl -s -m 5 "$URL/metrics")
for why in evicted idle_pressure; do
  n=$(echo "$m" | sed -n "s/^ebb_connections_closed_total{why=\"$why\"} //p")
  [ "${n:-0}" -gt 0 ] || fail "/metrics: ebb_connections_closed_total{why=\"$why\"} is '${n:-}' after the checks above"
done
echo "$m" | grep -q '^ebb_connections_open [0-9]' || fail "/metrics has no ebb_connections_open"
stop_server; rc=$?
[ "$rc" = 0 ] || fail "ebb serve exited $rc on SIGTERM"
if [ "$fails" -ne 0 ]; then echo "--- server log"; tail -30 "$T/log"; exit 1; fi

# the short soak: default limits, 1,000 sockets reconnecting from 19 addresses
# (the figure itself comes from the full run: bench/healthz_soak, docs/api.md)
timeout 60 "$EBB_BUILD_DIR/bench/healthz_soak" --sockets 1000 --seconds 5 --probes 200 \
  --timeout-ms 2000 --base-seconds 0 --max-failed 0 > "$T/soak" 2>&1
rc=$?
cat "$T/soak"
[ "$rc" = 0 ] || { echo "FAIL: healthz_soak (exit $rc)"; exit 1; }
echo "server_connections: all checks passed"
