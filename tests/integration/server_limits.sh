#!/usr/bin/env bash
# How much one client can hold: a slow-loris client (headers one byte a
# second) and an idle socket are closed after header_timeout_s; a body that
# trickles is closed too; past max_connections_per_ip from one address a
# newcomer takes the place of that address's oldest idle connection (so the
# newest 16 stay; server_connections.sh checks the order) while /healthz from
# another address still answers.
# (More than FD_SETSIZE sockets at once: server_soak.sh.)
set -u
. "$(dirname "$0")/../lib/server.sh"
RAW="$(cd "$(dirname "$0")/../support" && pwd)/rawhttp.py"
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {"quick": {"stages": [{"stage": "synthetic", "options": {"weights_mib": 1}}]}},
 "server": {"header_timeout_s": 1, "idle_timeout_s": 3, "max_connections_per_ip": 16,
            "min_body_rate": 4096}}
JSON
serve "$T/log" --config "$T/cfg.json" --data-dir "$T/data" --no-cache
PORT=${URL##*:}

python3 - "$PORT" "$(cd "$(dirname "$0")/../support" && pwd)" > "$T/out" 2>&1 <<'PY'
import resource, socket, sys, time
port = int(sys.argv[1])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))

sys.path.insert(0, sys.argv[2])
from rawhttp import closed, conn as raw_conn

def conn(src):
    return raw_conn(port, src, timeout=5)

def healthz_ms(src="127.0.0.1"):
    t0 = time.time(); s = conn(src)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        b = s.recv(4096)
        if not b: break
        data += b
    s.close()
    ok = data.startswith(b"HTTP/1.1 200")
    return (time.time() - t0) * 1000, ok

# a slow loris: one header byte a second
s = conn("127.0.0.1")
s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
t0 = time.time(); shut = None
while time.time() - t0 < 8:
    try: s.sendall(b"a")
    except OSError: shut = time.time() - t0; break
    if closed(s, 1.0): shut = time.time() - t0; break
print("loris", "closed after %.1f s" % shut if shut else "still open after 8 s")
# an idle socket
s = conn("127.0.0.1"); t0 = time.time(); shut = None
while time.time() - t0 < 8:
    if closed(s, 0.5): shut = time.time() - t0; break
print("idle", "closed after %.1f s" % shut if shut else "still open after 8 s")
# a body that trickles
s = conn("127.0.0.1")
s.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
t0 = time.time(); shut = None
while time.time() - t0 < 8:
    try: s.sendall(b" ")
    except OSError: shut = time.time() - t0; break
    if closed(s, 1.0): shut = time.time() - t0; break
print("trickle", "closed after %.1f s" % shut if shut else "still open after 8 s")
# 40 sockets from one address: the 16 the per-IP cap allows stay
many = [conn("127.0.0.2") for _ in range(40)]
time.sleep(0.2)
print("per_ip_open", sum(1 for k in many if not closed(k, 0.001)))
ms, ok = healthz_ms("127.0.0.1")
print("healthz_beside_capped_ip %.1f %s" % (ms, ok))
for k in many: k.close()
PY
cat "$T/out"
get() { sed -n "s/^$1 //p" "$T/out"; }
case $(get loris) in "closed after "[12].*) ;; *) fail "slow loris: $(get loris) (header_timeout_s 1)" ;; esac
case $(get idle) in "closed after "[12].*) ;; *) fail "idle socket: $(get idle) (header_timeout_s 1)" ;; esac
case $(get trickle) in "closed after "[1234].*) ;; *) fail "trickling body: $(get trickle) (min_body_rate 4096)" ;; esac
[ "$(get per_ip_open)" = 16 ] || fail "per-IP cap 16: $(get per_ip_open) of 40 sockets from one address stayed open"
case $(get healthz_beside_capped_ip) in *True) ;; *) fail "healthz beside a capped address: $(get healthz_beside_capped_ip)" ;; esac
curl -s -m 5 "$URL/healthz" | grep -q ok || fail "the server stopped answering"
stop_server; rc=$?
[ "$rc" = 0 ] || fail "ebb serve exited $rc on SIGTERM"
if [ "$fails" -ne 0 ]; then echo "--- server log"; tail -30 "$T/log"; exit 1; fi
echo "server_limits: all checks passed"
