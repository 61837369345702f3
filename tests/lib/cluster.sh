# Sourced by the cluster_* tests: common.sh (T, fail, jget), the redis tools
# they need, a free loopback PORT for their redis-server, the node/redis
# bookkeeping (NPID, URL, RPID) and the cleanup that stops them all on exit;
#   start_redis [redis-server flags...]  a redis-server in $T/redis on PORT,
#                        answering PING within 10 s (else the test fails)
#   node_up NAME         waits (10 s) for node NAME's listening line in
#                        $T/log-NAME; sets URL[NAME]
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
command -v redis-server >/dev/null || { echo "FAIL: redis-server missing (scripts/install-deps.sh installs it)"; exit 1; }
command -v redis-cli >/dev/null || { echo "FAIL: redis-cli missing (redis-tools)"; exit 1; }
mkdir -p "$T/redis"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
RPID= ; declare -A NPID URL
cleanup() {
  for n in "${!NPID[@]}"; do kill -TERM "${NPID[$n]}" 2>/dev/null; done
  for n in "${!NPID[@]}"; do wait "${NPID[$n]}" 2>/dev/null; done
  [ -n "$RPID" ] && kill -TERM "$RPID" 2>/dev/null && wait "$RPID" 2>/dev/null
}
trap 'cleanup >/dev/null 2>&1 || true' EXIT
rcli() { redis-cli -h 127.0.0.1 -p "$PORT" "$@"; }
start_redis() {
  redis-server --port "$PORT" --bind 127.0.0.1 --dir "$T/redis" --save "" --daemonize no \
    --logfile "$T/redis/log" "$@" &
  RPID=$!
  for _ in $(seq 100); do rcli ping 2>/dev/null | grep -q PONG && return 0; sleep 0.1; done
  fail "redis-server did not answer on port $PORT"; cat "$T/redis/log"; exit 1
}
node_up() {
  for _ in $(seq 100); do grep -q '^ebb: listening on' "$T/log-$1" 2>/dev/null && break; sleep 0.1; done
  URL[$1]=$(head -1 "$T/log-$1" | sed -n 's/^ebb: listening on //p')
  [ -n "${URL[$1]}" ] || { echo "FAIL: node $1: no listening line"; cat "$T/log-$1"; exit 1; }
}
